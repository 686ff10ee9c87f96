// pn-llama-logits.mjs - stock llama.cpp's next-token logits for given token
// ids, for pn-compare (pipeline/compare.h). llama.cpp is the prebuilt CPU
// build inside the npm package node-llama-cpp (installed beside this file by
// `npm ci --omit=optional`, see package.json; scripts/install-deps does it).
// No GPU, no download, no compiling; greedy evaluation only (nothing is
// sampled), a fixed thread count, so a run is deterministic.
//
// Usage:
//   node pn-llama-logits.mjs --version
//       prints {"node_llama_cpp": "...", "llama_cpp": "..."} (one JSON line) on
//       stdout, after loading llama.cpp: the check that it is installed.
//   node pn-llama-logits.mjs MODEL.gguf --threads N [--print-version]
//       token ids from stdin (below), logits to file descriptor 3; with
//       --print-version the --version line first goes to stdout.
//   node pn-llama-logits.mjs MODEL.gguf --threads N --text FILE --seq-len L --max-seqs K
//       the token ids are FILE's text (UTF-8) as the model's tokenizer cuts
//       it (no special tokens parsed), in sequences of L tokens, at most K of
//       them (a text shorter than L gives one shorter sequence).
//
// All integers are little-endian uint32, floats little-endian IEEE float32.
//   stdin:  n_seq, then per sequence: len, len token ids.
//   fd 3:   "PNLOGIT1" (8 bytes), n_vocab, n_seq, per sequence: len, len token
//           ids (the ids evaluated); then for each sequence, for each position
//           p (0..len-1): n_vocab logits, the model's scores for the token
//           after ids[0..p] (llama.cpp's raw output row, before any sampling).
// Each sequence is evaluated from an empty context in one batch.
// Messages go to stderr. Exit status: 0 done, 1 error, 2 usage, 3 llama.cpp
// (node-llama-cpp) is not installed or cannot start.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

function fail(code, msg) {
    process.stderr.write(`pn-llama-logits: ${msg}\n`);
    process.exit(code);
}

function parseArgs(argv) {
    const a = { model: null, threads: 0, text: null, seqLen: 0, maxSeqs: 0, version: false, printVersion: false };
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i];
        const num = () => {
            const v = argv[++i];
            if (v === undefined || !/^[0-9]+$/.test(v))
                fail(2, `${k} needs a whole number, got '${v ?? ""}'`);
            return Number(v);
        };
        if (k === "--version") a.version = true;
        else if (k === "--print-version") a.printVersion = true;
        else if (k === "--threads") a.threads = num();
        else if (k === "--seq-len") a.seqLen = num();
        else if (k === "--max-seqs") a.maxSeqs = num();
        else if (k === "--text") {
            a.text = argv[++i];
            if (a.text === undefined) fail(2, "--text needs a file");
        } else if (k.startsWith("--")) fail(2, `unknown option ${k}`);
        else if (a.model === null) a.model = k;
        else fail(2, `unexpected argument '${k}'`);
    }
    if (!a.version && (a.model === null || a.threads < 1))
        fail(2, "usage: node pn-llama-logits.mjs MODEL.gguf --threads N [--text FILE --seq-len L --max-seqs K]");
    if (a.text !== null && (a.seqLen < 1 || a.maxSeqs < 1))
        fail(2, "--text needs --seq-len and --max-seqs of at least 1");
    return a;
}

function readAll(fd) {
    const chunks = [];
    const buf = Buffer.alloc(1 << 16);
    for (;;) {
        let n;
        try {
            n = fs.readSync(fd, buf, 0, buf.length, null);
        } catch (e) {
            if (e.code === "EAGAIN") continue;
            if (e.code === "EOF") break;
            throw e;
        }
        if (n === 0) break;
        chunks.push(Buffer.from(buf.subarray(0, n)));
    }
    return Buffer.concat(chunks);
}

function parseTokens(buf) {
    const u32 = (off) => {
        if (off + 4 > buf.length) fail(1, `token input ends at byte ${buf.length}, expected more`);
        return buf.readUInt32LE(off);
    };
    let off = 0;
    const nSeq = u32(off);
    off += 4;
    const seqs = [];
    for (let s = 0; s < nSeq; s++) {
        const len = u32(off);
        off += 4;
        if (len < 1) fail(1, `sequence ${s} is empty`);
        const ids = [];
        for (let i = 0; i < len; i++, off += 4) ids.push(u32(off));
        seqs.push(ids);
    }
    if (off !== buf.length) fail(1, `token input has ${buf.length - off} bytes past its last sequence`);
    return seqs;
}

function writeAll(fd, buf) {
    let off = 0;
    while (off < buf.length) {
        try {
            off += fs.writeSync(fd, buf, off, buf.length - off);
        } catch (e) {
            if (e.code === "EAGAIN") continue;
            if (e.code === "EPIPE") process.exit(1);
            throw e;
        }
    }
}

const args = parseArgs(process.argv.slice(2));

let nlc;
try {
    nlc = await import("node-llama-cpp");
} catch (e) {
    fail(3, `node-llama-cpp is not installed beside ${path.join(here, "pn-llama-logits.mjs")} ` +
        `(${e.code ?? e.message}): run 'cd ${here} && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci ` +
        `--ignore-scripts --omit=optional' (in a checkout, scripts/install-deps does the same)`);
}
const { getLlama, LlamaLogLevel } = nlc;

let llama;
try {
    llama = await getLlama({
        gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
        progressLogs: false, maxThreads: 0, logLevel: LlamaLogLevel.error,
        logger: (level, message) => process.stderr.write(message),
    });
} catch (e) {
    fail(3, `llama.cpp (node-llama-cpp's prebuilt CPU binaries) cannot start: ${e.message}`);
}

if (args.version || args.printVersion) {
    const pkg = JSON.parse(fs.readFileSync(path.join(here, "node_modules", "node-llama-cpp", "package.json"), "utf8"));
    const line = JSON.stringify({ node_llama_cpp: pkg.version, llama_cpp: llama.llamaCppRelease.release }) + "\n";
    await new Promise((done) => process.stdout.write(line, done));
    if (args.version) process.exit(0);
}

let seqs = args.text === null ? parseTokens(readAll(0)) : null;

let model;
try {
    model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0, useMlock: false, checkTensors: false });
} catch (e) {
    fail(1, `${args.model}: llama.cpp cannot load the model: ${e.message}`);
}
// the vocabulary the file declares (to refuse ids outside it before
// llama.cpp does, less clearly); the logits rows are checked against it
const declared = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length;

if (seqs === null) {
    let text;
    try {
        text = fs.readFileSync(args.text, "utf8");
    } catch (e) {
        fail(1, `${args.text}: cannot read the text: ${e.message}`);
    }
    const ids = Array.from(model.tokenize(text, false));
    if (ids.length === 0) fail(1, `${args.text}: the text gives no tokens`);
    seqs = [];
    for (let at = 0; at < ids.length && seqs.length < args.maxSeqs; at += args.seqLen) {
        const s = ids.slice(at, at + args.seqLen);
        if (s.length < args.seqLen && seqs.length > 0) break;
        seqs.push(s);
    }
}

let maxLen = 0;
for (const [s, ids] of seqs.entries()) {
    maxLen = Math.max(maxLen, ids.length);
    for (const [i, t] of ids.entries())
        if (declared !== undefined && t >= declared)
            fail(1, `sequence ${s} token ${i}: id ${t} is outside the model's vocabulary of ${declared}`);
}

const u32buf = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
function writeHeader(nVocab) {
    const head = [Buffer.from("PNLOGIT1", "latin1"), u32buf(nVocab), u32buf(seqs.length)];
    for (const ids of seqs) {
        head.push(u32buf(ids.length));
        head.push(Buffer.from(Uint32Array.from(ids).buffer));
    }
    writeAll(3, Buffer.concat(head));
}

let context;
try {
    context = await model.createContext({
        contextSize: Math.max(maxLen, 16), batchSize: Math.max(maxLen, 16), sequences: 1,
        threads: args.threads, flashAttention: false,
    });
} catch (e) {
    fail(1, `${args.model}: llama.cpp cannot create a context of ${maxLen} tokens: ${e.message}`);
}
const sequence = context.getSequence();
// llama.cpp's n_vocab is the length of its first logits row
let nVocab = 0, row = null, rowBytes = null;
for (const [s, ids] of seqs.entries()) {
    await sequence.clearHistory();
    let res;
    try {
        res = await sequence.controlledEvaluate(ids.map((t) => [t, { generateNext: { logits: true } }]));
    } catch (e) {
        fail(1, `${args.model}: llama.cpp failed to evaluate sequence ${s}: ${e.message}`);
    }
    for (let p = 0; p < ids.length; p++) {
        const logits = res[p]?.next?.logits;
        if (row === null && logits) {
            nVocab = logits.size;
            if (declared !== undefined && nVocab !== declared)
                fail(1, `${args.model}: llama.cpp gives ${nVocab} logits, the file declares ${declared} tokens`);
            row = new Float32Array(nVocab);
            rowBytes = Buffer.from(row.buffer);
            writeHeader(nVocab);
        }
        if (!logits || logits.size !== nVocab)
            fail(1, `${args.model}: sequence ${s} position ${p}: llama.cpp gave ${logits ? logits.size : 0} logits, expected ${nVocab}`);
        row.fill(Number.NaN);
        for (const [tok, v] of logits) row[tok] = v;
        writeAll(3, rowBytes);
    }
}
await context.dispose();
await model.dispose();
process.exit(0);
