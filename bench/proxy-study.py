#!/usr/bin/env python3
# The proxies of bench/proxy-study.sh (issue 41 item 4), from the files it
# makes in one model's folder:
#   stats.tsv   bench_proxy_stats: per candidate K, rows, weights, the rows
#               sampled, and the measurement's sums err3, err4, norm: plain,
#               weighted by the input norm's gain squared (g), by the imatrix (i)
#   gains.tsv   bench_proxy_kl on CALIB: base, then one line per candidate in
#               stats.tsv's order: gain = KL(base) - KL(base + candidate)
#   heldout.tsv bench_proxy_kl on TEXT: base, then the chosen mixes
#   proxy-study.py choose MODEL_DIR N...   writes choice/*.list and choice/map.tsv
#   proxy-study.py table DIR MODEL...      prints the tables (markdown)
# Only the standard library: bench scripts need nothing installed.
import hashlib
import math
import os
import subprocess
import sys

# score(c) for a candidate row c of stats.tsv; larger is promoted first,
# equal scores keep tensor order (as mix/promote.h orders)
def _d(c, a, b):
    return float(c[a]) - float(c[b])

def _frac(c):  # whole tensor / sampled rows
    return float(c["rows"]) / float(c["sampled"])

def _perw(c, s=""):
    return _d(c, "e3" + s, "e4" + s) / (float(c["sampled"]) * float(c["K"]))

PROXIES = [
    ("score", "mix/promote_score.h: forward position (block, role), then E3 - E4",
     lambda c: float(c["score"])),
    ("rel", "E3 - E4, relative (today's order)",
     lambda c: _d(c, "e3", "e4") / float(c["norm"])),
    ("abs", "(E3 - E4) x sum w^2: absolute error gain of the whole tensor",
     lambda c: _d(c, "e3", "e4") * _frac(c)),
    ("perbyte", "absolute gain per byte: (E3 - E4) x mean w^2",
     lambda c: _perw(c)),
    ("depth", "shallowest block first",
     lambda c: -float(c["block"])),
    ("perbyte/depth", "absolute gain per byte / (block + 1)",
     lambda c: _perw(c) / (float(c["block"]) + 1)),
    ("g-rel", "E3 - E4 weighted by the input norm's gain^2, relative",
     lambda c: _d(c, "e3g", "e4g") / float(c["normg"])),
    ("g-abs", "absolute gain weighted by the input norm's gain^2",
     lambda c: _d(c, "e3g", "e4g") * _frac(c)),
    ("g-perbyte", "that per byte",
     lambda c: _perw(c, "g")),
    ("g-perbyte/depth", "that / (block + 1)",
     lambda c: _perw(c, "g") / (float(c["block"]) + 1)),
]
IMATRIX_PROXIES = [
    ("i-rel", "imatrix-weighted E3 - E4, relative (today's with --imatrix)",
     lambda c: _d(c, "e3i", "e4i") / float(c["normi"])),
    ("i-abs", "imatrix-weighted absolute gain",
     lambda c: _d(c, "e3i", "e4i") * _frac(c)),
    ("i-perbyte", "imatrix-weighted absolute gain per byte",
     lambda c: _perw(c, "i")),
    ("i-perbyte/depth", "that / (block + 1)",
     lambda c: _perw(c, "i") / (float(c["block"]) + 1)),
]
ORACLE = ("kl", "the measured KL gains on CALIB (what --measure kl gives)")
# the proxies whose mixes are judged on TEXT (each mix is a llama.cpp run;
# the others' orders are only correlated)
JUDGED = ["score", "rel", "abs", "perbyte", "i-rel", "i-perbyte", "kl"]


def tsv(path):
    with open(path) as f:
        rows = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def load(mdir):
    stats = tsv(os.path.join(mdir, "stats.tsv"))
    gains = tsv(os.path.join(mdir, "gains.tsv"))[1:]
    assert len(gains) == len(stats), mdir
    for c, g in zip(stats, gains):
        assert os.path.basename(g["file"]).startswith(c["name"]), (g["file"], c["name"])
        c["gain"], c["gain_se"] = float(g["gain"]), float(g["gain_se"])
    return stats


def proxies(stats):
    ps = list(PROXIES)
    if "e3i" in stats[0]:
        ps += IMATRIX_PROXIES
    return ps + [(ORACLE[0], ORACLE[1], lambda c: c["gain"])]


def order(stats, score):
    idx = sorted(range(len(stats)), key=lambda i: -score(stats[i]))  # stable: tensor order
    return [stats[i]["name"] for i in idx]


def ranks(v):
    idx = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and v[idx[j + 1]] == v[idx[i]]:
            j += 1
        for k in range(i, j + 1):
            r[idx[k]] = (i + j) / 2.0 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    sab = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    saa = sum((x - ma) ** 2 for x in ra)
    sbb = sum((y - mb) ** 2 for y in rb)
    return sab / math.sqrt(saa * sbb) if saa > 0 and sbb > 0 else float("nan")


def choose(mdir, counts):
    stats = load(mdir)
    cdir = os.path.join(mdir, "choice")
    os.makedirs(cdir, exist_ok=True)
    lines = []
    for name, _, score in proxies(stats):
        if name not in JUDGED:
            continue
        o = order(stats, score)
        for n in counts:
            chosen = sorted(o[:n])
            h = hashlib.sha256("\n".join(chosen).encode()).hexdigest()[:12]
            path = os.path.join(cdir, "set-" + h + ".list")
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write("".join(x + "\n" for x in chosen))
            lines.append("%s\t%d\t%s\n" % (name, n, h))
    with open(os.path.join(cdir, "map.tsv"), "w") as f:
        f.write("".join(lines))


def heldout(mdir, build):
    """KL on TEXT per chosen set, and each set's gain over today's ("rel")
    choice with the paired standard error (bench_proxy_kl against it)."""
    cdir = os.path.join(mdir, "choice")
    m = [l.rstrip("\n").split("\t") for l in open(os.path.join(cdir, "map.tsv"))]
    kl = {}
    for r in tsv(os.path.join(mdir, "heldout.tsv")):
        kl[os.path.basename(r["file"])] = r
    out = {}
    for n in sorted({int(x[1]) for x in m}):
        sets = [x for x in m if int(x[1]) == n]
        files = [os.path.join(cdir, "set-%s.text.logits" % x[2]) for x in sets]
        paired = {}
        for ref in ("rel", "kl"):
            h = [x[2] for x in sets if x[0] == ref][0]
            res = subprocess.run([os.path.join(build, "bin", "bench_proxy_kl"),
                                  os.path.join(mdir, "src.text.logits"),
                                  os.path.join(cdir, "set-%s.text.logits" % h)] + files,
                                 check=True, capture_output=True, text=True).stdout
            paired[ref] = tsv_text(res)[1:]
        for i, x in enumerate(sets):
            r = kl["set-%s.text.logits" % x[2]]
            nbytes = int(open(os.path.join(cdir, "set-%s.bytes" % x[2])).read())
            out[(x[0], n)] = dict(kl=float(r["kl_mean"]), se=float(r["kl_se"]),
                                  vs_today=float(paired["rel"][i]["gain"]),
                                  vs_today_se=float(paired["rel"][i]["gain_se"]),
                                  vs_kl=float(paired["kl"][i]["gain"]),
                                  vs_kl_se=float(paired["kl"][i]["gain_se"]),
                                  bytes=nbytes)
    base = tsv(os.path.join(mdir, "heldout.tsv"))[0]
    return out, float(base["kl_mean"]), os.path.getsize(os.path.join(mdir, "base.gguf"))


def tsv_text(s):
    rows = [l.split("\t") for l in s.strip().split("\n")]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def table(d, models, build):
    missing = [m for m in models if not os.path.exists(os.path.join(d, m, "gains.tsv"))]
    if missing:
        print("proxy-study: not measured (left out): " + " ".join(missing), file=sys.stderr)
    models = [m for m in models if m not in missing]
    data = {m: load(os.path.join(d, m)) for m in models}
    names = [p[0] for p in proxies(data[models[0]])]
    descr = {p[0]: p[1] for p in proxies(data[models[0]])}
    rho = {p: {} for p in names}
    for m in models:
        st = data[m]
        g = [c["gain"] for c in st]
        for name, _, score in proxies(st):
            rho[name][m] = spearman([score(c) for c in st], g)
    ho = {}
    for m in models:
        if os.path.exists(os.path.join(d, m, "heldout.tsv")):
            ho[m] = heldout(os.path.join(d, m), build)
    print("Models: " + ", ".join("%s (%d candidates; single KL gains %.4f..%.4f, "
                                   "median standard error %.4f)"
                                   % (m, len(data[m]), min(c["gain"] for c in data[m]),
                                      max(c["gain"] for c in data[m]),
                                      sorted(c["gain_se"] for c in data[m])[len(data[m]) // 2])
                                   for m in models))
    print()
    print("Spearman correlation with the KL gains, per model:")
    print()
    print("| proxy | " + " | ".join(models) + " | mean |")
    print("|---|" + "---|" * (len(models) + 1))
    for p in names:
        v = [rho[p][m] for m in models]
        print("| %s | " % p + " | ".join("%.2f" % x for x in v) + " | **%.2f** |" % (sum(v) / len(v)))
    print()
    if not ho:
        return
    hm = [m for m in models if m in ho]
    counts = sorted({k[1] for m in hm for k in ho[m][0]})
    print("Held-out mean KL of the chosen mixes (%d models: %s); per count, the "
          "mean over models of the KL, and of the gain over today's choice "
          "(rel) and over the KL gains' (kl), each with its standard error (paired over positions, combined over "
          "models as sqrt(sum se^2)/n):" % (len(hm), ", ".join(hm)))
    print()
    hdr = "| proxy | what it is | Spearman (mean) |"
    for n in counts:
        hdr += " P0k+%d MB | KL | gain over today's | over kl's |" % n
    print(hdr)
    print("|---|---|---|" + "---|---|---|---|" * len(counts))
    p0 = sum(ho[m][1] for m in hm) / len(hm)
    b0 = sum(ho[m][2] for m in hm) / len(hm) / 1e6
    print("| (P0k+0) | no promotion | |" + " %.3f | %.4f | | |" % (b0, p0) * len(counts))
    for p in names:
        row = "| %s | %s | %.2f |" % (p, descr[p], sum(rho[p][m] for m in models) / len(models))
        if p not in JUDGED:
            print(row + " | | | |" * len(counts))  # not judged
            continue
        for n in counts:
            r = [ho[m][0][(p, n)] for m in hm]
            k = sum(x["kl"] for x in r) / len(r)
            g = sum(x["vs_today"] for x in r) / len(r)
            se = math.sqrt(sum(x["vs_today_se"] ** 2 for x in r)) / len(r)
            mb = sum(x["bytes"] for x in r) / len(r) / 1e6
            gk = sum(x["vs_kl"] for x in r) / len(r)
            sek = math.sqrt(sum(x["vs_kl_se"] ** 2 for x in r)) / len(r)
            row += " %.3f | %.4f | %+.4f ± %.4f | %+.4f ± %.4f |" % (mb, k, g, se, gk, sek)
        print(row)
    print()
    print("Per model, held-out KL (standard error of the mean KL in brackets):")
    print()
    print("| proxy | N | " + " | ".join(hm) + " |")
    print("|---|---|" + "---|" * len(hm))
    for p in [x for x in names if x in JUDGED]:
        for n in counts:
            print("| %s | %d | " % (p, n) + " | ".join(
                "%.4f (%.4f)" % (ho[m][0][(p, n)]["kl"], ho[m][0][(p, n)]["se"]) for m in hm) + " |")


def main():
    if sys.argv[1] == "choose":
        choose(sys.argv[2], [int(x) for x in sys.argv[3:]])
    elif sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3:], os.environ.get("BUILD", "build"))
    else:
        sys.exit("usage: proxy-study.py choose MODEL_DIR N... | table DIR MODEL...")


if __name__ == "__main__":
    main()
