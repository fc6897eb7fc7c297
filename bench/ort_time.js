// Times one model through ONNX Runtime (onnxruntime-node), the counterpart of
// `looprun --repeat --warmup --threads [--output_dir]`. Inputs come from a JSON file written by
// compare_ort.py ({name: {dtype, dims, data}}, data a list of numbers or the raw little-endian
// bytes in base64), so both engines see the same values. Prints one
// JSON line with median_us / p90_us / min_us, timed around session.run only, and
// cpu_median_us (the process's CPU time per run, process.cpuUsage: every thread).
//
//   NODE_PATH=<node_modules> [ORT_ALLOW_SPINNING=0] node ort_time.js MODEL INPUTS_JSON REPEAT WARMUP THREADS [OUT_JSON]
//
// With OUT_JSON, the outputs of the last run are written there (after all timing) as
// {name: {dims, dtype, data}} in model output order. Numeric `data` is the tensor's raw
// little-endian bytes in base64 (exact for int64 and NaN, and a 32 MB float output stays 43 MB
// rather than 160 MB of decimal text); string tensors are a JSON array of strings.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

const TYPED = {
  float32: Float32Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array,
  uint8: Uint8Array, int8: Int8Array, float64: Float64Array,  // bench/op_grid.py's quantized ops
};

function encodeOutputs(session, results) {
  const out = {};
  for (const name of session.outputNames) {
    const t = results[name];
    const data = t.type === 'string'
      ? Array.from(t.data)
      : Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).toString('base64');
    out[name] = {dims: Array.from(t.dims), dtype: t.type, data};
  }
  return out;
}

async function main() {
  const [model, inputsJson, repeat, warmup, threads, outputsJson] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    // ORT_ALLOW_SPINNING=0 (compare_ort.py --ort-no-spin): intra-op threads sleep when idle
    // instead of spinning (session.intra_op.allow_spinning), as loopserve's OpenMP threads do.
    ...(process.env.ORT_ALLOW_SPINNING === '0'
      ? {extra: {session: {intra_op: {allow_spinning: '0'}}}} : {}),
  });
  const spec = JSON.parse(fs.readFileSync(inputsJson, 'utf8'));
  const feeds = {};
  for (const [name, t] of Object.entries(spec)) {
    let data;
    if (typeof t.data === 'string') {  // raw little-endian bytes in base64
      const bytes = Buffer.from(t.data, 'base64');
      const copy = new Uint8Array(bytes.length);  // aligned for the typed view
      copy.set(bytes);
      data = new TYPED[t.dtype](copy.buffer);
    } else {
      data = t.dtype === 'int64' ? BigInt64Array.from(t.data.map(BigInt))
                                 : TYPED[t.dtype].from(t.data);
    }
    feeds[name] = new ort.Tensor(t.dtype, data, t.dims);
  }
  const times = [];
  const cpuTimes = [];
  let results = null;
  for (let i = 0; i < Number(warmup) + Number(repeat); ++i) {
    const cpuStart = process.cpuUsage();
    const start = process.hrtime.bigint();
    results = await session.run(feeds);
    const us = Number(process.hrtime.bigint() - start) / 1000;
    const cpu = process.cpuUsage(cpuStart);
    if (i >= Number(warmup)) {
      times.push(us);
      cpuTimes.push(cpu.user + cpu.system);
    }
  }
  if (outputsJson) fs.writeFileSync(outputsJson, JSON.stringify(encodeOutputs(session, results)));
  times.sort((a, b) => a - b);
  cpuTimes.sort((a, b) => a - b);
  const n = times.length;
  const middle = (v) => (n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
  console.log(JSON.stringify({
    model, repeat: n, median_us: middle(times),
    p90_us: times[Math.min(n - 1, Math.floor(n * 0.9))], min_us: times[0],
    cpu_median_us: middle(cpuTimes),
  }));
}

main().catch((e) => { console.error(e); process.exit(2); });
