// The third-party side of the byte-level BPE tests: OpenAI's tiktoken (its Rust core compiled to
// WebAssembly, npm package `tiktoken`) encodes the test documents, and the tokenizer.json files that
// hpctrain reads are built from the same packages' vocabulary files.
//
// usage: node tiktoken_reference.cjs NODE_MODULES DOCS.json OUTDIR
//
// For each encoding it writes OUTDIR/NAME.json (a Hugging Face tokenizer.json) and OUTDIR/NAME.ids
// (one line per document of DOCS.json: the ids, space-separated). A document is a list of segments,
// strings or integers (a byte that is not UTF-8): tiktoken encodes each string with encode_ordinary
// (special tokens' text is text); a byte becomes its single-byte token, the rule hpctrain keeps.
//
//   gpt2    tiktoken's gpt2 ranks; GPT-2's layout: a ByteLevel pre-tokenizer with its built-in
//           regex, merges only (no ignore_merges), <|endoftext|> as an added special token
//   cl100k  cl100k_base; Llama 3's layout: a Split of the regex, then ByteLevel; ignore_merges
//   o200k   o200k_base, the same layout with its case-aware regex
//   llama3  Llama 3's vocabulary and merges as bundled by `llama3-tokenizer-js`, encoded by
//           tiktoken with those ranks (Meta's own Llama 3 tokenizer is tiktoken with them);
//           its tokenizer.json as Meta's Hugging Face release lays it out (ignore_merges,
//           <|begin_of_text|> in the post-processor, 256 special tokens)
//
// Merges for the tiktoken vocabularies are derived as Hugging Face's converter does: for every
// token, every split into two tokens, ordered by the merged token's rank.
"use strict";
const fs = require("fs");
const path = require("path");

const [nodeModules, docsPath, outDir] = process.argv.slice(2);
const { Tiktoken } = require(path.join(nodeModules, "tiktoken"));
const docs = JSON.parse(fs.readFileSync(docsPath, "utf8"));
fs.mkdirSync(outDir, { recursive: true });

const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GPT-2's bytes_to_unicode: printable Latin-1 stands for itself, the rest from U+0100 on.
const byteToChar = (() => {
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  const out = [];
  let n = 0;
  for (let b = 0; b < 256; ++b) out.push(String.fromCodePoint(printable(b) ? b : 256 + n++));
  return out;
})();
const charToByte = new Map(byteToChar.map((c, b) => [c, b]));
const toSymbol = (bytes) => Array.from(bytes, (b) => byteToChar[b]).join("");
const fromSymbol = (s) => Buffer.from(Array.from(s, (c) => charToByte.get(c)));

// tiktoken's "! OFFSET b64 b64 ..." rank lists.
function parseRanks(bfe) {
  const tokens = [];
  let rank = 0;
  const words = bfe.split(/\s+/);
  for (let i = 0; i < words.length; ++i) {
    if (words[i] === "") continue;
    if (words[i] === "!") {
      rank = parseInt(words[++i], 10);
      continue;
    }
    tokens.push([Buffer.from(words[i], "base64"), rank++]);
  }
  return tokens;
}

function toBfe(tokens) {
  return "! 0 " + tokens.map(([bytes]) => bytes.toString("base64")).join(" ");
}

function deriveMerges(tokens) {
  const rankOf = new Map(tokens.map(([bytes, rank]) => [bytes.toString("latin1"), rank]));
  const merges = [];
  for (const [bytes, rank] of tokens) {
    if (bytes.length < 2) continue;
    const key = bytes.toString("latin1");
    const local = [];
    for (let i = 1; i < key.length; ++i) {
      const l = rankOf.get(key.slice(0, i)), r = rankOf.get(key.slice(i));
      if (l !== undefined && r !== undefined) local.push([l, r, rank, i]);
    }
    local.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    for (const [, , , i] of local) merges.push([rank, toSymbol(bytes.subarray(0, i)), toSymbol(bytes.subarray(i))]);
  }
  merges.sort((a, b) => a[0] - b[0]);  // stable: the local order stays within one merged token
  return merges.map(([, a, b]) => [a, b]);
}

function tokenizerJson({ vocab, merges, specials, preTokenizer, ignoreMerges, bos }) {
  const special_tokens = {};
  if (bos) special_tokens[bos[0]] = { id: bos[0], ids: [bos[1]], tokens: [bos[0]] };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: Object.entries(specials).map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: bos
      ? { type: "TemplateProcessing",
          single: [{ SpecialToken: { id: bos[0], type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
          pair: [{ SpecialToken: { id: bos[0], type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
                 { SpecialToken: { id: bos[0], type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
          special_tokens }
      : { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
             vocab, merges },
  };
}

const splitThenBytes = (pattern) => ({
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
});

function encodeAll(enc, name) {
  const lines = docs.map((doc) => {
    const ids = [];
    for (const seg of doc) {
      if (typeof seg === "number") ids.push(enc.encode_single_token(Uint8Array.of(seg)));
      else for (const id of enc.encode_ordinary(seg)) ids.push(id);
    }
    return ids.join(" ");
  });
  fs.writeFileSync(path.join(outDir, name + ".ids"), lines.join("\n") + "\n");
}

function writeJson(name, obj) {
  fs.writeFileSync(path.join(outDir, name + ".json"), JSON.stringify(obj));
}

// ---- the tiktoken vocabularies ----------------------------------------------------------------
for (const [name, file, layout] of [["gpt2", "gpt2", "gpt2"], ["cl100k", "cl100k_base", "split"],
                                    ["o200k", "o200k_base", "split"]]) {
  const spec = JSON.parse(fs.readFileSync(path.join(nodeModules, "tiktoken", "encoders", file + ".json"), "utf8"));
  const tokens = parseRanks(spec.bpe_ranks);
  const vocab = {};
  for (const [bytes, rank] of tokens) vocab[toSymbol(bytes)] = rank;
  const gpt2 = layout === "gpt2";
  writeJson(name, tokenizerJson({
    vocab: gpt2 ? { ...vocab, "<|endoftext|>": 50256 } : vocab,
    merges: deriveMerges(tokens),
    specials: spec.special_tokens,
    preTokenizer: gpt2 ? { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }
                       : splitThenBytes(spec.pat_str),
    ignoreMerges: !gpt2,
  }));
  const enc = new Tiktoken(spec.bpe_ranks, spec.special_tokens, spec.pat_str);
  encodeAll(enc, name);
  enc.free();
  console.log(`${name}: ${tokens.length} ranks`);
}

// ---- Llama 3 ------------------------------------------------------------------------------------
{
  const llama = require(path.join(nodeModules, "llama3-tokenizer-js", "bundle",
                                  "commonjs-llama3-tokenizer-with-baked-data.cjs")).llama3Tokenizer;
  const BASE = 128000;
  const vocab = {};
  const tokens = [];
  for (let id = 0; id < BASE; ++id) {
    vocab[llama.vocabById[id]] = id;
    tokens.push([fromSymbol(llama.vocabById[id]), id]);
  }
  const specials = {};
  for (let id = BASE; id < llama.vocabById.length; ++id) specials[llama.vocabById[id]] = id;
  const merges = Array.from(llama.merges.keys(), (k) => k.split(" "));
  writeJson("llama3", tokenizerJson({
    vocab, merges, specials, preTokenizer: splitThenBytes(LLAMA3_PATTERN), ignoreMerges: true,
    bos: ["<|begin_of_text|>", specials["<|begin_of_text|>"]],
  }));
  const enc = new Tiktoken(toBfe(tokens), specials, LLAMA3_PATTERN);
  encodeAll(enc, "llama3");
  enc.free();
  console.log(`llama3: ${tokens.length} ranks, ${merges.length} merges, ${Object.keys(specials).length} special tokens`);
}
