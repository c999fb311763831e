// bench/tokenizer.sh's tiktoken side: MB/s of encode_ordinary (tiktoken's Rust core as WebAssembly)
// over FILES, on THREADS worker threads that each encode every THREADS-th file with their own encoder.
// usage: node tokenizer_tiktoken.cjs NODE_MODULES ENCODING THREADS FILE...
"use strict";
const { Worker, isMainThread, parentPort, workerData } = require("worker_threads");
const fs = require("fs");
const path = require("path");

if (isMainThread) {
  const [nodeModules, encoding, threadsArg, ...files] = process.argv.slice(2);
  const threads = parseInt(threadsArg, 10);
  const bytes = files.reduce((n, f) => n + fs.statSync(f).size, 0);
  let ready = 0, done = 0, start = 0, tokens = 0;
  const workers = [];
  for (let t = 0; t < threads; ++t) {
    const w = new Worker(__filename, { workerData: { nodeModules, encoding, files: files.filter((_, i) => i % threads === t) } });
    w.on("message", (m) => {
      if (m.ready && ++ready === threads) {  // every worker has its encoder and its text: start the clock
        start = process.hrtime.bigint();
        workers.forEach((x) => x.postMessage("go"));
      }
      if (m.tokens !== undefined) {
        tokens += m.tokens;
        if (++done === threads) {
          const s = Number(process.hrtime.bigint() - start) / 1e9;
          console.log(JSON.stringify({ mb_per_s: bytes / 1e6 / s, seconds: s, bytes, tokens }));
        }
      }
    });
    workers.push(w);
  }
} else {
  const { Tiktoken } = require(path.join(workerData.nodeModules, "tiktoken"));
  const spec = JSON.parse(fs.readFileSync(path.join(workerData.nodeModules, "tiktoken", "encoders", workerData.encoding + ".json"), "utf8"));
  const enc = new Tiktoken(spec.bpe_ranks, spec.special_tokens, spec.pat_str);
  const texts = workerData.files.map((f) => fs.readFileSync(f, "utf8"));
  parentPort.postMessage({ ready: true });
  parentPort.once("message", () => {
    let tokens = 0;
    for (const t of texts) tokens += enc.encode_ordinary(t).length;
    parentPort.postMessage({ tokens });
    enc.free();
  });
}
