// gguf-dump.mjs - prints a local GGUF file's keys, values and tensor infos as
// one line of JSON, parsed by an independent implementation (the npm package
// @huggingface/gguf), so that tests/gguf/test_gguf_node.c can compare it with ours.
//
// Usage: node tests/node/gguf-dump.mjs FILE.gguf
// Setup: npm ci --prefix tests/node
//
// Output, chosen so that C code can print the same text byte for byte:
//   {"version":3,"tensor_data_offset":"N",
//    "kv":[{"key":K,"type":T,"value":V} or
//          {"key":K,"type":"array","elem_type":T,"value":[V,...]}, ...],
//    "tensors":[{"name":N,"n_dims":D,"shape":["ne0",...],"dtype":ID,"offset":"O"}, ...]}
// Values: integers up to 32 bits as JSON numbers; 64-bit integers as decimal
// strings; float32/float64 as "0x" + the IEEE bits in hex (exact, unlike a
// decimal rendering); strings as JSON strings; bools as true/false. Inside
// nested arrays the package gives no element types, so elements are printed
// by their JavaScript type (bigint as a string, number as a JSON number).
import { gguf } from "@huggingface/gguf";

const TYPE_NAMES = [
  "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
  "string", "array", "uint64", "int64", "float64",
];

function f32Bits(v) {
  const dv = new DataView(new ArrayBuffer(4));
  dv.setFloat32(0, v, true);
  return "0x" + dv.getUint32(0, true).toString(16).padStart(8, "0");
}

function f64Bits(v) {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setFloat64(0, v, true);
  return "0x" + dv.getBigUint64(0, true).toString(16).padStart(16, "0");
}

function untyped(v) {
  if (typeof v === "bigint") return v.toString();
  if (Array.isArray(v)) return v.map(untyped);
  return v;
}

function typed(type, v) {
  switch (TYPE_NAMES[type]) {
    case "float32": return f32Bits(v);
    case "float64": return f64Bits(v);
    case "uint64":
    case "int64": return v.toString();
    case "array": return untyped(v);
    default: return v;
  }
}

async function main() {
  const path = process.argv[2];
  if (!path) {
    process.stderr.write("usage: node gguf-dump.mjs FILE.gguf\n");
    process.exit(2);
  }
  const { metadata, typedMetadata, tensorInfos, tensorDataOffset } = await gguf(path, {
    allowLocalFile: true,
    typedMetadata: true,
  });
  const kv = [];
  // The package puts version, tensor_count and kv_count first in the map.
  for (const [key, entry] of Object.entries(typedMetadata).slice(3)) {
    const item = { key, type: TYPE_NAMES[entry.type] };
    if (entry.type === 9) {
      item.elem_type = TYPE_NAMES[entry.subType];
      item.value = entry.value.map((e) => typed(entry.subType, e));
    } else {
      item.value = typed(entry.type, entry.value);
    }
    kv.push(item);
  }
  const tensors = tensorInfos.map((t) => ({
    name: t.name,
    n_dims: t.n_dims,
    shape: t.shape.map((d) => d.toString()),
    dtype: t.dtype,
    offset: t.offset.toString(),
  }));
  const out = {
    version: metadata.version,
    tensor_data_offset: tensorDataOffset.toString(),
    kv,
    tensors,
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write(`gguf-dump: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
