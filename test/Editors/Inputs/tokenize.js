// Tokenizes .mdl files with the editor grammar (vscode-textmate with the
// Oniguruma WebAssembly build, as VS Code does) and checks the scopes
// against an independent lexer of grammar/MDL.g4's tokens:
//   * every line tokenizes, and every character outside whitespace gets a
//     scope beyond source.mdl;
//   * comments get comment.*, strings string.*, integers constant.numeric.*;
//   * the grammar's reserved words (literals of MDL.g4 that its `name` rule
//     does not accept as names) get keyword.*, storage.type.* or
//     constant.language.*.
// Usage: node tokenize.js MODULES_DIR GRAMMAR_JSON MDL_G4 FILE...
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesDir, grammarPath, g4Path, ...files] = process.argv.slice(2);
const vsctm = require(path.join(modulesDir, 'vscode-textmate'));
const oniguruma = require(path.join(modulesDir, 'vscode-oniguruma'));

// Reserved words, from the grammar itself.
const g4 = fs.readFileSync(g4Path, 'utf8');
const literals = new Set([...g4.matchAll(/'([a-z]+)'/g)].map((m) => m[1]));
const nameRule = g4.match(/^name\s*:([\s\S]*?);/m)[1];
const contextual = new Set([...nameRule.matchAll(/'([a-z]+)'/g)].map((m) => m[1]));
const reserved = [...literals].filter((w) => !contextual.has(w));

// The independent lexer: MDL.g4's lexer rules.
function* lex(text) {
  const rules = [
    ['comment', /\/\/[^\r\n]*/y],
    ['comment', /\/\*[\s\S]*?\*\//y],
    ['string', /"(?:[^"\\\r\n]|\\[^\r\n])*"/y],
    ['int', /[0-9]+/y],
    ['word', /[a-zA-Z_][a-zA-Z_0-9]*/y],
    ['space', /[ \t\r\n]+/y],
    ['punct', /[^\sA-Za-z_0-9"]/y],
  ];
  let i = 0;
  while (i < text.length) {
    let matched = false;
    for (const [kind, re] of rules) {
      re.lastIndex = i;
      const m = re.exec(text);
      if (!m) continue;
      yield { kind, start: i, text: m[0] };
      i += m[0].length;
      matched = true;
      break;
    }
    if (!matched) throw new Error('lexer stuck at ' + i);
  }
}

async function main() {
  const wasm = fs.readFileSync(path.join(modulesDir, 'vscode-oniguruma', 'release', 'onig.wasm'));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (s) => new oniguruma.OnigScanner(s),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async (scope) =>
      scope === 'source.mdl'
        ? vsctm.parseRawGrammar(fs.readFileSync(grammarPath, 'utf8'), grammarPath)
        : null,
  });
  const grammar = await registry.loadGrammar('source.mdl');
  let failures = 0, lines = 0;
  const counts = { comment: 0, string: 0, int: 0, keyword: 0 };
  const fail = (file, line, col, msg) => {
    if (++failures <= 20) console.log(`${file}:${line + 1}:${col + 1}: ${msg}`);
  };
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const textLines = text.split('\n');
    // scopes[line][col]: the scopes of each character.
    const scopes = [];
    let stack = vsctm.INITIAL;
    textLines.forEach((line, n) => {
      const r = grammar.tokenizeLine(line, stack, 1000);
      if (r.stoppedEarly) fail(file, n, 0, 'tokenizing stopped early');
      const row = new Array(line.length);
      for (const t of r.tokens)
        for (let c = t.startIndex; c < Math.min(t.endIndex, line.length); ++c) row[c] = t.scopes;
      scopes.push(row);
      stack = r.ruleStack;
      ++lines;
    });
    // Offsets to (line, column).
    const lineStart = [0];
    for (let i = 0; i < text.length; ++i) if (text[i] === '\n') lineStart.push(i + 1);
    const at = (offset) => {
      let lo = 0, hi = lineStart.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (lineStart[mid] <= offset) lo = mid; else hi = mid - 1;
      }
      return [lo, offset - lineStart[lo]];
    };
    const has = (sc, prefixes) => sc && sc.some((s) => prefixes.some((p) => s.startsWith(p)));
    for (const tok of lex(text)) {
      if (tok.kind === 'space') continue;
      // Every character of the token, on every line it spans.
      for (let k = 0; k < tok.text.length; ++k) {
        if (/\s/.test(tok.text[k])) continue;
        const [l, c] = at(tok.start + k);
        const sc = scopes[l][c];
        if (!sc || sc.length < 2) {
          fail(file, l, c, `'${tok.text}' has no scope beyond source.mdl`);
          break;
        }
        const want = tok.kind === 'comment' ? ['comment.']
          : tok.kind === 'string' ? ['string.']
          : tok.kind === 'int' ? ['constant.numeric.']
          : tok.kind === 'word' && reserved.includes(tok.text)
            ? ['keyword.', 'storage.type.', 'constant.language.']
          : null;
        if (!want) break;
        if (!has(sc, want)) {
          fail(file, l, c, `${tok.kind} '${tok.text}' scoped ${sc.join(' ')}, expected ${want.join(' or ')}`);
          break;
        }
        if (k === 0) ++counts[tok.kind === 'word' ? 'keyword' : tok.kind];
      }
    }
  }
  console.log(`tokenized ${files.length} files, ${lines} lines: ` +
    `${counts.comment} comments, ${counts.string} strings, ${counts.int} numbers, ` +
    `${counts.keyword} reserved words checked, ${failures} failures`);
  console.log(`reserved words: ${reserved.sort().join(' ')}`);
  process.exit(failures ? 1 : 0);
}
main().catch((e) => { console.log('error: ' + e.message); process.exit(1); });
