//===- Format.cpp - The canonical layout of MDL source --------------------===//
//
// A formatter over the token stream: the parser first checks the file, then
// the lexer's tokens, comments included (they are on the hidden channel),
// are laid out again. Whitespace of the source is not read except for
// whether a comment shares a line with the token before it and where blank
// lines were, so the result does not depend on the source's layout and
// formatting is idempotent.
//
// Statements become logical lines; a logical line that does not fit in 80
// columns is broken at the place of the lowest bracket depth that lets the
// line fit, the rightmost of those (after a comma or an `=`, before
// `when`, `if`, `&&`, `||`, `??`, `?` and `:`, after `+` and `=>`).
//
//===----------------------------------------------------------------------===//

#include "mdl/Parse/Parser.h"

#include "MDLLexer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/SourceMgr.h"

#include "antlr4-runtime.h"

using namespace mdl;
using llvm::StringRef;

namespace {

enum class Kind { Word, Name, Int, String, Punct, LineComment, BlockComment };

struct Token {
  std::string text;
  Kind kind;
  /// Line breaks between the previous token (or comment) and this one.
  unsigned newlinesBefore;
};

/// A piece of a logical line.
struct Item {
  std::string text;
  bool spaceBefore = true;
  /// Whether the line may break before this item, and its priority (lower
  /// is taken first): twice the bracket depth, plus one for operators.
  int breakBefore = -1;
  bool comment = false;
};

struct LogicalLine {
  unsigned indent = 0; // columns
  bool continuation = false;
  bool blankBefore = false;
  std::vector<Item> items;
};

/// Words the grammar accepts as names as well as keywords (MDL.g4's `name`
/// rule): before `(` and `[` they call or index, as names do.
bool isContextualKeyword(StringRef w) {
  static const llvm::StringSet<> words = {
      "first",      "last",     "stages", "copy",   "offset",  "view",
      "split",      "derived",  "recompute", "fallback", "example", "mesh",
      "class",      "capability", "needs", "replicate", "on",    "by",
      "column",     "row",      "vocab",  "shard",  "replicated", "bias",
      "scale",      "pipeline", "extends", "from",  "dtype",   "choice",
      "buffer",     "zero",     "neg_exp", "mxfp4"};
  return words.contains(w);
}

size_t columns(StringRef s) {
  size_t n = 0;
  for (char c : s.take_until([](char c) { return c == '\n'; }))
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

class Formatter {
public:
  explicit Formatter(std::vector<Token> tokens) : toks(std::move(tokens)) {}

  std::string run() {
    for (i = 0; i < toks.size(); ++i)
      token(toks[i]);
    endLine();
    std::string out;
    for (const LogicalLine &l : lines)
      emit(l, out);
    return out;
  }

private:
  /// An open bracket of the current statement: ( [ { (a part set) or <
  /// (list<...>), with the `?` of conditionals open inside it.
  struct Bracket {
    char kind;
    int ternaries = 0;
  };

  bool operand(const Token *t) const {
    if (!t)
      return false;
    return t->kind == Kind::Name || t->kind == Kind::Int ||
           t->kind == Kind::String || t->text == ")" || t->text == "]" ||
           t->text == "}" || t->text == "true" || t->text == "false";
  }

  int &ternaries() {
    return brackets.empty() ? statementTernaries : brackets.back().ternaries;
  }
  int depth() const { return static_cast<int>(brackets.size()); }

  void add(std::string text, bool space, int breakBefore = -1,
           bool comment = false) {
    if (breakAfterNext >= 0 && breakBefore < 0 && !comment)
      breakBefore = breakAfterNext;
    if (!comment)
      breakAfterNext = -1;
    if (cur.items.empty() || (noSpaceNext && !comment))
      space = false;
    if (!comment)
      noSpaceNext = false;
    cur.items.push_back({std::move(text), space, breakBefore, comment});
  }

  void endLine() {
    if (!cur.items.empty())
      lines.push_back(std::move(cur));
    cur = LogicalLine();
    cur.indent = 2 * blocks.size();
    closePending = false;
    breakAfterNext = -1;
  }

  /// Starts a statement, or a comment on its own line, at block level.
  void startLine(const Token &t) {
    cur.blankBefore = !cur.continuation && t.newlinesBefore >= 2 &&
                      !lines.empty() && !lastOpensBlock() && t.text != "}";
  }
  bool lastOpensBlock() const {
    const std::vector<Item> &items = lines.back().items;
    for (auto it = items.rbegin(); it != items.rend(); ++it)
      if (!it->comment)
        return it->text == "{";
    return false;
  }

  void comment(const Token &t) {
    bool midStatement = !cur.items.empty() && !closePending;
    if (t.newlinesBefore == 0 && (!cur.items.empty() || !lines.empty())) {
      // A trailing comment stays on the line of the token before it.
      if (cur.items.empty())
        lines.back().items.push_back({t.text, true, -1, true});
      else
        add(t.text, true, -1, true);
      if (t.kind == Kind::LineComment && !cur.items.empty()) {
        endLine();
        cur.continuation = midStatement;
      }
      return;
    }
    // A comment on its own line.
    if (midStatement) {
      endLine();
      cur.continuation = true;
    } else if (!cur.items.empty()) {
      endLine();
    }
    bool continuation = cur.continuation;
    startLine(t);
    add(t.text, false, -1, true);
    endLine();
    cur.continuation = continuation;
  }

  void token(const Token &t) {
    if (t.kind == Kind::LineComment || t.kind == Kind::BlockComment) {
      comment(t);
      return;
    }
    // After a block's `}`, only `;` or a condition continue the line.
    if (closePending && t.text != ";" && t.text != "if")
      endLine();
    closePending = false;
    if (cur.items.empty())
      startLine(t);
    const Token *p = prev;
    prev = &t;
    StringRef s = t.text;
    bool statementLevel = brackets.empty();

    if (s == "{" && statementLevel) {
      bool isMatch = llvm::any_of(cur.items, [](const Item &item) {
        return item.text == "match";
      });
      if (i + 1 < toks.size() && toks[i + 1].text == "}") {
        add("{}", true);
        ++i;
        prev = &toks[i];
        closePending = true;
        return;
      }
      add("{", true);
      blocks.push_back(isMatch);
      endLine();
      statementTernaries = 0;
      return;
    }
    if (s == "}" && statementLevel) {
      endLine();
      if (!blocks.empty())
        blocks.pop_back();
      cur.indent = 2 * blocks.size();
      add("}", false);
      closePending = true;
      return;
    }
    if (s == ";" && statementLevel) {
      add(";", false);
      endLine();
      statementTernaries = 0;
      firstWord.clear();
      return;
    }
    if (s == "," && statementLevel && !blocks.empty() && blocks.back()) {
      add(",", false); // an arm of a match
      endLine();
      return;
    }
    if (cur.items.empty() && !cur.continuation)
      firstWord = s.str();

    bool nameBefore = p && p->kind == Kind::Name;
    if (s == "(" || s == "[") {
      bool tight = nameBefore || (p && (p->text == ")" || p->text == "]"));
      add(t.text, !tight);
      brackets.push_back({s[0]});
      noSpaceNext = true;
      return;
    }
    if (s == "{") { // a part set inside brackets
      add("{", true);
      brackets.push_back({'{'});
      noSpaceNext = true;
      return;
    }
    if (s == ")" || s == "]" || s == "}") {
      add(t.text, false);
      if (!brackets.empty())
        brackets.pop_back();
      return;
    }
    if (s == "<" && p && p->text == "list") {
      add("<", false);
      brackets.push_back({'<'});
      noSpaceNext = true;
      return;
    }
    if (s == ">" && !brackets.empty() && brackets.back().kind == '<') {
      add(">", false);
      brackets.pop_back();
      return;
    }
    if (s == ",") {
      add(",", false);
      breakAfterNext = 2 * depth();
      return;
    }
    if (s == ".") {
      add(".", false);
      noSpaceNext = true;
      return;
    }
    if ((s == "-" && !operand(p)) || s == "!") {
      add(t.text, true);
      noSpaceNext = true;
      return;
    }
    if (s == "?") {
      ++ternaries();
      add("?", true, 2 * depth() + 1);
      return;
    }
    if (s == ":") {
      if (ternaries() > 0) {
        --ternaries();
        add(":", true, 2 * depth() + 1);
      } else if (statementLevel && firstWord == "require") {
        add(":", true, 1);
      } else {
        add(":", false);
        if (statementLevel)
          breakAfterNext = 0;
      }
      return;
    }
    if (s == "&&" || s == "||" || s == "??") {
      add(t.text, true, 2 * depth() + 1);
      return;
    }
    if ((s == "when" || s == "if" || s == "recompute") && statementLevel) {
      add(t.text, true, 0);
      return;
    }
    if (s == "=" || s == "=>" || s == "+") {
      add(t.text, true);
      if (s == "+")
        breakAfterNext = 2 * depth() + 1;
      else if (statementLevel)
        breakAfterNext = 0;
      return;
    }
    add(t.text, true);
  }

  /// Writes a logical line as physical lines of at most kFormatColumns,
  /// choosing the breaks of least penalty: each break costs by its
  /// priority (so breaking at a low depth, several times, beats breaking
  /// inside brackets), each column beyond the limit costs more than any
  /// break, and of layouts that cost the same the one that fills earlier
  /// lines wins.
  void emit(const LogicalLine &l, std::string &out) const {
    if (l.blankBefore)
      out += "\n";
    const std::vector<Item> &items = l.items;
    size_t end = items.size(); // items before the trailing line comments
    while (end > 0 && items[end - 1].comment &&
           items[end - 1].text.rfind("//", 0) == 0)
      --end;
    // cols[k], spaces[k]: columns of items[0..k) and spaces before them.
    std::vector<size_t> cols(end + 1, 0), spaces(end + 1, 0);
    for (size_t k = 0; k < end; ++k) {
      cols[k + 1] = cols[k] + columns(items[k].text);
      spaces[k + 1] = spaces[k] + items[k].spaceBefore;
    }
    auto segment = [&](size_t k, size_t j, size_t indent) -> long {
      size_t width = indent + cols[j] - cols[k] + spaces[j] - spaces[k + 1];
      return width > kFormatColumns ? 1000L * long(width - kFormatColumns)
                                    : 0L;
    };
    auto breakCost = [&](size_t j) { return 5L + 10L * items[j].breakBefore; };
    const size_t first = l.indent + (l.continuation ? 4 : 0),
                 rest = l.indent + 4;
    // best[k]: the cost of items[k..end) on continuation lines, and the
    // next break (end for none).
    std::vector<long> best(end + 1, 0);
    std::vector<size_t> next(end + 1, end);
    auto choose = [&](size_t k, size_t indent, long &cost, size_t &cut) {
      cost = segment(k, end, indent);
      cut = end;
      for (size_t j = end; j-- > k + 1;) {
        if (items[j].breakBefore < 0)
          continue;
        long c = segment(k, j, indent) + breakCost(j) + best[j];
        if (c < cost) {
          cost = c;
          cut = j;
        }
      }
    };
    for (size_t k = end; k-- > 1;)
      if (items[k].breakBefore >= 0)
        choose(k, rest, best[k], next[k]);
    // A line of nothing but trailing comments has nothing to break.
    long cost = 0;
    size_t cut = 0;
    if (end > 0)
      choose(0, first, cost, cut);
    size_t start = 0, indent = first;
    while (true) {
      std::string line(indent, ' ');
      size_t last = cut == end ? items.size() : cut;
      for (size_t k = start; k < last; ++k) {
        if (k > start && items[k].spaceBefore)
          line += ' ';
        line += items[k].text;
      }
      out += line + "\n";
      if (cut == end)
        break;
      start = cut;
      cut = next[cut];
      indent = rest;
    }
  }

  std::vector<Token> toks;
  size_t i = 0;
  const Token *prev = nullptr;
  std::vector<LogicalLine> lines;
  LogicalLine cur;
  /// Open blocks; true for a match's, whose arms end at commas.
  std::vector<bool> blocks;
  std::vector<Bracket> brackets;
  int statementTernaries = 0;
  std::string firstWord;
  bool closePending = false;
  /// The next item follows the last without a space: after an opening
  /// bracket, a `.` or a unary operator.
  bool noSpaceNext = false;
  int breakAfterNext = -1;
};

} // namespace

std::optional<std::string> mdl::formatFile(llvm::SourceMgr &sourceMgr,
                                           unsigned bufferId,
                                           mlir::MLIRContext &context) {
  // Only what parses is formatted.
  if (!parseFile(sourceMgr, bufferId, context))
    return std::nullopt;
  StringRef text = sourceMgr.getMemoryBuffer(bufferId)->getBuffer();
  std::vector<Token> tokens;
  try {
    antlr4::ANTLRInputStream input(text.str());
    mdlgen::MDLLexer lexer(&input);
    lexer.removeErrorListeners();
    size_t lastLine = 1;
    for (const std::unique_ptr<antlr4::Token> &t : lexer.getAllTokens()) {
      Token tok;
      tok.text = t->getText();
      size_t type = t->getType();
      tok.kind = type == mdlgen::MDLLexer::LINE_COMMENT    ? Kind::LineComment
                 : type == mdlgen::MDLLexer::BLOCK_COMMENT ? Kind::BlockComment
                 : type == mdlgen::MDLLexer::STRING        ? Kind::String
                 : type == mdlgen::MDLLexer::INT           ? Kind::Int
                 : type == mdlgen::MDLLexer::IDENT         ? Kind::Name
                 : llvm::isAlpha(tok.text[0]) ? Kind::Word
                                              : Kind::Punct;
      if (tok.kind == Kind::Word && isContextualKeyword(tok.text))
        tok.kind = Kind::Name;
      tok.newlinesBefore = t->getLine() - lastLine;
      lastLine = t->getLine() + StringRef(tok.text).count('\n');
      tokens.push_back(std::move(tok));
    }
  } catch (const std::exception &) {
    return std::nullopt; // the parser above has accepted the file
  }
  return Formatter(std::move(tokens)).run();
}
