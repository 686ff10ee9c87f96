# scripts/slurm-measure.sh: sourced by scripts/slurm-quantize when its
# pn-quantize options hold --measure kl and the measurement is not done yet.
# Submits the measurement as an array of $mtasks tasks (each pn-quantize
# --measure-part I/N into $meas.part-IIIII-of-NNNNN) and a job that runs when
# they have all ended: it checks every part is finished, then runs
# slurm-quantize again with the same arguments (PN_SLURM_MEASURED=1), whose
# dry run joins the parts into $meas and which submits the splits and the
# check job as without a measurement. Exits the script.
mparts=()
plan_args=()   # the arguments again, less --wait: the plan job must not wait for jobs after it
for a in "${all_args[@]}"; do [ "$a" = --wait ] || plan_args+=("$a"); done
for ((i = 1; i <= mtasks; i++)); do mparts+=("$(printf '%s.part-%05d-of-%05d' "$meas" "$i" "$mtasks")"); done
{
  echo "# written by scripts/slurm-quantize: the KL measurement's array and the job after it"
  printf 'SRC=%q\nMEAS=%q\nBIN=%q\nME=%q\nWORK=%q\nM=%q\n' "$SRC" "$meas" "$bin" "$me" "$WORK" "$mtasks"
  printf 'QOPTS=('; printf '%q ' "${qopts[@]}"; printf ')\n'
  printf 'ALL_ARGS=('; printf '%q ' "${plan_args[@]}"; printf ')\n'
  printf 'MPARTS=('; printf '%q ' "${mparts[@]}"; printf ')\n'
} > "$WORK/measure-settings.sh"
cat > "$WORK/measure.sh" <<EOF
#!/bin/bash
# One share of the KL measurement per array task (scripts/slurm-quantize wrote this).
set -uo pipefail
source $(printf %q "$WORK/measure-settings.sh")
i=\${SLURM_ARRAY_TASK_ID:?this is an array task: submit it with sbatch --array}
echo "measurement task \$i of \$M on \$(hostname)"
exec "\$BIN/pn-quantize" "\${QOPTS[@]}" --threads "\${SLURM_CPUS_PER_TASK:-1}" --measure-part "\$((i + 1))/\$M" "\$SRC"
EOF
cat > "$WORK/plan.sh" <<EOF
#!/bin/bash
# Once the measurement's tasks have ended: the rest, submitted from here
# (scripts/slurm-quantize wrote this).
set -uo pipefail
source $(printf %q "$WORK/measure-settings.sh")
missing=()
for ((i = 0; i < M; i++)); do
  [ -f "\${MPARTS[i]}" ] && grep -q '^end\$' "\${MPARTS[i]}" || missing+=("\$i")
done
if [ \${#missing[@]} -gt 0 ]; then
  v="INCOMPLETE: KL measurement task(s) \${missing[*]} of 0-\$((M - 1)) failed or did not finish (logs: \$WORK/logs/measure-INDEX.JOB.log); submit again: the parts that are done are kept, an unfinished one resumes"
  echo "\$v" > "\$WORK/verdict.tmp" && mv "\$WORK/verdict.tmp" "\$WORK/verdict"
  echo "\$v"
  exit 1
fi
PN_SLURM_MEASURED=1 exec "\$ME" "\${ALL_ARGS[@]}"
EOF
chmod +x "$WORK/measure.sh" "$WORK/plan.sh"
msb=(sbatch --parsable "--job-name=pn-m-$NAME" "--array=0-$((mtasks - 1))" "--cpus-per-task=$cpus"
     "--mem=$mem" "--time=$time" "--output=$WORK/logs/measure-%a.%A.log" "${sb_extra[@]}")
if [ "$dry" = 1 ]; then
  echo "would run: ${msb[*]} $WORK/measure.sh"
  echo "would run: sbatch --parsable --job-name=pn-m-$NAME-plan --dependency=afterany:MEASURE ... $WORK/plan.sh"
  exit 0
fi
rm -f "$WORK/verdict"
out=$("${msb[@]}" "$WORK/measure.sh") || die "sbatch refused the measurement array (above)"
MEASURE_JOB=${out%%;*}
# afterany: the plan job runs whatever the tasks' outcome and names a failed one
out=$(sbatch --parsable "--job-name=pn-m-$NAME-plan" "--dependency=afterany:$MEASURE_JOB" \
        "--cpus-per-task=$cpus" "--mem=$mem" "--time=$time" \
        "--output=$WORK/logs/plan.%j.log" "${sb_extra[@]}" "$WORK/plan.sh") \
  || die "sbatch refused the job after the measurement (above); the measurement $MEASURE_JOB is submitted"
PLAN_JOB=${out%%;*}
{ echo "MEASURE_JOB=$MEASURE_JOB"; echo "PLAN_JOB=$PLAN_JOB"; } > "$WORK/jobs.sh"
say "submitted: the KL measurement, array job $MEASURE_JOB ($mtasks tasks), then job $PLAN_JOB, which plans and submits the splits"
if [ "$wait" = 1 ]; then
  wait_verdict
  exit $?
fi
exit 0
