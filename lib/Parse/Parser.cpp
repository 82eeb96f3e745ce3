//===- Parser.cpp - ANTLR parse tree to the MDL AST -----------------------===//
//
// This file is compiled with exceptions and RTTI, as the ANTLR runtime needs
// them. Everything ANTLR reports is turned into MLIR diagnostics here, and
// no exception leaves this file.
//
//===----------------------------------------------------------------------===//

#include "mdl/Parse/Parser.h"

#include "MDLLexer.h"
#include "MDLParser.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/SourceMgr.h"

#include "antlr4-runtime.h"

using namespace mdl;
using namespace mdl::ast;
using P = mdlgen::MDLParser;

mlir::Location mdl::toLocation(llvm::SourceMgr &sourceMgr,
                               mlir::MLIRContext &context, llvm::SMLoc loc) {
  unsigned bufferId = sourceMgr.FindBufferContainingLoc(loc);
  if (!bufferId)
    return mlir::UnknownLoc::get(&context);
  auto [line, col] = sourceMgr.getLineAndColumn(loc, bufferId);
  llvm::StringRef file =
      sourceMgr.getMemoryBuffer(bufferId)->getBufferIdentifier();
  return mlir::FileLineColLoc::get(&context, file, line, col);
}

namespace {

/// Maps ANTLR's code-point indices back to bytes of the source buffer.
class SourceIndex {
public:
  SourceIndex(llvm::StringRef text) : text(text) {
    for (size_t i = 0; i < text.size(); ++i)
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80)
        offsets.push_back(i);
    offsets.push_back(text.size());
  }
  llvm::SMLoc loc(size_t codePoint) const {
    size_t byte = codePoint < offsets.size() ? offsets[codePoint] : text.size();
    return llvm::SMLoc::getFromPointer(text.data() + byte);
  }

private:
  llvm::StringRef text;
  std::vector<size_t> offsets;
};

/// ANTLR's messages are terse; say the same thing in the project's voice.
/// A long list of expected tokens says nothing useful: drop it.
std::string rewrite(const std::string &original) {
  std::string msg = original;
  size_t expecting = msg.find(" expecting {");
  if (expecting != std::string::npos &&
      std::count(msg.begin() + expecting, msg.end(), ',') >= 6)
    msg.erase(expecting);
  llvm::StringRef m(msg);
  if (m.starts_with("token recognition error at: ")) {
    llvm::StringRef what = m.drop_front(strlen("token recognition error at: "));
    if (what.starts_with("'\""))
      return "unterminated string literal";
    // Show control characters as escapes, not raw bytes.
    std::string shown;
    for (char c : what.drop_front().drop_back()) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        char buf[8];
        snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
        shown += buf;
      } else {
        shown += c;
      }
    }
    return "unexpected character '" + shown + "'";
  }
  if (m.starts_with("extraneous input "))
    return "unexpected " + m.drop_front(strlen("extraneous input ")).str();
  if (m.starts_with("mismatched input "))
    return "unexpected " + m.drop_front(strlen("mismatched input ")).str();
  if (m.starts_with("no viable alternative at input "))
    return "cannot parse " +
           m.drop_front(strlen("no viable alternative at input ")).str();
  return msg;
}


/// Reports ANTLR's lexer and parser errors as located diagnostics.
class DiagnosticErrorListener : public antlr4::BaseErrorListener {
public:
  DiagnosticErrorListener(llvm::SourceMgr &sm, unsigned bufferId,
                          mlir::MLIRContext &ctx, const SourceIndex &index)
      : sm(sm), bufferId(bufferId), ctx(ctx), index(index) {}

  void syntaxError(antlr4::Recognizer *, antlr4::Token *offending, size_t line,
                   size_t col, const std::string &msg,
                   std::exception_ptr) override {
    ++errorCount;
    if (errorCount > kMaxErrors)
      return;
    llvm::SMLoc loc;
    if (offending && offending->getStartIndex() != INVALID_INDEX)
      loc = index.loc(offending->getStartIndex());
    else
      loc = locFromLineCol(line, col);
    errors.push_back({loc, rewrite(msg)});
  }

  /// Reports the errors in file order: the lexer's (found first, as the
  /// tokens are read before parsing) among the parser's.
  void flush() {
    std::stable_sort(errors.begin(), errors.end(), [](auto &a, auto &b) {
      return a.first.getPointer() < b.first.getPointer();
    });
    for (auto &[loc, msg] : errors)
      mlir::emitError(toLocation(sm, ctx, loc)) << msg;
    errors.clear();
  }

  unsigned errorCount = 0;
  std::vector<std::pair<llvm::SMLoc, std::string>> errors;

private:
  static constexpr unsigned kMaxErrors = 20;

  llvm::SMLoc locFromLineCol(size_t line, size_t col) {
    // Lexer errors carry only a line and a code-point column, in the file
    // being parsed (an imported file is not the main one).
    llvm::SMLoc lineStart = sm.FindLocForLineAndColumn(bufferId, line, 1);
    const char *p = lineStart.getPointer();
    if (!p)
      return lineStart;
    const char *end = sm.getMemoryBuffer(bufferId)->getBufferEnd();
    for (size_t c = 0; c < col && p < end && *p != '\n';) {
      ++p;
      if ((static_cast<unsigned char>(*p) & 0xC0) != 0x80)
        ++c;
    }
    return llvm::SMLoc::getFromPointer(p);
  }

  llvm::SourceMgr &sm;
  unsigned bufferId;
  mlir::MLIRContext &ctx;
  const SourceIndex &index;
};

/// Thrown inside the builder to abandon a tree that nests too deeply; it is
/// caught in parseFile and becomes a diagnostic.
struct TooDeep {
  llvm::SMLoc loc;
};

class ASTBuilder {
public:
  ASTBuilder(llvm::SourceMgr &sm, mlir::MLIRContext &ctx,
             const SourceIndex &index)
      : sm(sm), ctx(ctx), index(index) {}

  std::unique_ptr<File> build(P::FileContext *file);

  unsigned errorCount = 0;

private:
  // Locations -------------------------------------------------------------
  SMRange range(antlr4::ParserRuleContext *c) const {
    llvm::SMLoc begin = index.loc(c->getStart()->getStartIndex());
    antlr4::Token *stop = c->getStop();
    llvm::SMLoc end = stop && stop->getStopIndex() != INVALID_INDEX &&
                              stop->getStopIndex() >= c->getStart()->getStartIndex()
                          ? index.loc(stop->getStopIndex() + 1)
                          : begin;
    return SMRange(begin, end);
  }
  SMRange range(antlr4::tree::TerminalNode *t) const {
    antlr4::Token *tok = t->getSymbol();
    return SMRange(index.loc(tok->getStartIndex()),
                   index.loc(tok->getStopIndex() + 1));
  }
  mlir::InFlightDiagnostic error(llvm::SMLoc loc) {
    ++errorCount;
    return mlir::emitError(toLocation(sm, ctx, loc));
  }

  // Leaves ----------------------------------------------------------------
  Ident ident(P::NameContext *c) { return Ident{c->getText(), range(c)}; }
  std::string unquote(antlr4::tree::TerminalNode *t);
  QualifiedName qualified(P::QualifiedNameContext *c);
  Type type(P::TypeRefContext *c);

  // Expressions -----------------------------------------------------------
  ExprPtr expr(P::ExprContext *c);
  ExprPtr primary(P::PrimaryContext *c);
  NameTemplate nameTemplate(antlr4::tree::TerminalNode *t);

  // Members ---------------------------------------------------------------
  std::unique_ptr<ModuleDecl> module(P::ModuleDeclContext *c);
  std::unique_ptr<ModuleDecl> model(P::ModelDeclContext *c);
  void members(const std::vector<P::MemberContext *> &cs,
               std::vector<MemberPtr> &out);
  MemberPtr member(P::MemberContext *c);
  std::unique_ptr<LetMember> let(P::LetDeclContext *c);
  std::unique_ptr<RequireMember> require(P::RequireDeclContext *c);
  Shape shape(P::ShapeContext *c);
  ParallelStyle style(P::ParallelStyleContext *c);
  InstanceExpr instanceExpr(P::InstanceExprContext *c);
  ModuleCall call(P::ModuleCallContext *c);

  // Layouts and backends --------------------------------------------------
  std::unique_ptr<LayoutDecl> layout(P::LayoutDeclContext *c);
  TensorExpr tensorExpr(P::TensorExprContext *c);
  LayoutEntryPtr layoutEntry(P::LayoutEntryContext *c);
  AxisProduct axisProduct(const std::vector<P::AxisTermContext *> &cs);
  AxisTerm axisTerm(P::AxisTermContext *c);
  std::unique_ptr<BackendDecl> backend(P::BackendDeclContext *c);

  llvm::SourceMgr &sm;
  mlir::MLIRContext &ctx;
  const SourceIndex &index;
  unsigned depth = 0;
};

/// Counts recursion so that hostile nesting becomes an error, not a crash.
struct DepthGuard {
  DepthGuard(unsigned &depth, llvm::SMLoc loc) : depth(depth) {
    if (++depth > kMaxNestingDepth)
      throw TooDeep{loc};
  }
  ~DepthGuard() { --depth; }
  unsigned &depth;
};

std::string ASTBuilder::unquote(antlr4::tree::TerminalNode *t) {
  std::string text = t->getText();
  std::string out;
  llvm::StringRef body = llvm::StringRef(text).drop_front().drop_back();
  for (size_t i = 0; i < body.size(); ++i) {
    char ch = body[i];
    if (ch != '\\') {
      out.push_back(ch);
      continue;
    }
    char esc = body[++i];
    switch (esc) {
    case 'n': out.push_back('\n'); break;
    case 't': out.push_back('\t'); break;
    case '\\': out.push_back('\\'); break;
    case '"': out.push_back('"'); break;
    default:
      error(llvm::SMLoc::getFromPointer(range(t).Start.getPointer() + 1 + i -
                                        1))
          << "unknown escape sequence '\\" << esc << "'";
    }
  }
  return out;
}

QualifiedName ASTBuilder::qualified(P::QualifiedNameContext *c) {
  QualifiedName q;
  for (auto *n : c->name())
    q.parts.push_back(ident(n));
  q.range = range(c);
  return q;
}

Type ASTBuilder::type(P::TypeRefContext *c) {
  if (dynamic_cast<P::IntTypeContext *>(c))
    return Type::get(Type::Int);
  if (dynamic_cast<P::BoolTypeContext *>(c))
    return Type::get(Type::Bool);
  if (dynamic_cast<P::StringTypeContext *>(c))
    return Type::get(Type::String);
  if (dynamic_cast<P::DimTypeContext *>(c))
    return Type::get(Type::Dim);
  if (dynamic_cast<P::DtypeTypeContext *>(c))
    return Type::get(Type::DType);
  auto *list = static_cast<P::ListTypeContext *>(c);
  DepthGuard guard(depth, range(c).Start);
  return Type::listOf(type(list->typeRef()));
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

static BinaryOp binaryOp(const std::string &op) {
  static const std::pair<const char *, BinaryOp> table[] = {
      {"+", BinaryOp::Add}, {"-", BinaryOp::Sub},   {"*", BinaryOp::Mul},
      {"/", BinaryOp::Div}, {"%", BinaryOp::Mod},   {"<", BinaryOp::Lt},
      {"<=", BinaryOp::Le}, {">", BinaryOp::Gt},    {">=", BinaryOp::Ge},
      {"==", BinaryOp::Eq}, {"!=", BinaryOp::Ne},   {"&&", BinaryOp::And},
      {"||", BinaryOp::Or}, {"in", BinaryOp::In},   {"??", BinaryOp::Coalesce}};
  for (auto &[spelling, op2] : table)
    if (op == spelling)
      return op2;
  llvm_unreachable("operator not in the grammar");
}

ExprPtr ASTBuilder::expr(P::ExprContext *c) {
  SMRange r = range(c);
  DepthGuard guard(depth, r.Start);
  if (auto *p = dynamic_cast<P::PrimaryExprContext *>(c))
    return primary(p->primary());
  if (auto *x = dynamic_cast<P::IndexExprContext *>(c))
    return std::make_unique<IndexExpr>(expr(x->expr(0)), expr(x->expr(1)), r);
  if (auto *x = dynamic_cast<P::UnaryExprContext *>(c))
    return std::make_unique<UnaryExpr>(
        x->op->getText() == "-" ? UnaryOp::Neg : UnaryOp::Not, expr(x->expr()),
        r);
  if (auto *x = dynamic_cast<P::IsExprContext *>(c))
    return std::make_unique<IsExpr>(expr(x->expr()), ident(x->name()), r);
  if (auto *x = dynamic_cast<P::CondExprContext *>(c))
    return std::make_unique<CondExpr>(expr(x->expr(0)), expr(x->expr(1)),
                                      expr(x->expr(2)), r);
  // Every remaining alternative is a binary operator between two operands.
  auto binary = [&](auto *x, const std::string &op) {
    return std::make_unique<BinaryExpr>(binaryOp(op), expr(x->expr(0)),
                                        expr(x->expr(1)), r);
  };
  if (auto *x = dynamic_cast<P::MulExprContext *>(c))
    return binary(x, x->op->getText());
  if (auto *x = dynamic_cast<P::AddExprContext *>(c))
    return binary(x, x->op->getText());
  if (auto *x = dynamic_cast<P::RelExprContext *>(c))
    return binary(x, x->op->getText());
  if (auto *x = dynamic_cast<P::EqExprContext *>(c))
    return binary(x, x->op->getText());
  if (auto *x = dynamic_cast<P::InExprContext *>(c))
    return binary(x, "in");
  if (auto *x = dynamic_cast<P::AndExprContext *>(c))
    return binary(x, "&&");
  if (auto *x = dynamic_cast<P::OrExprContext *>(c))
    return binary(x, "||");
  if (auto *x = dynamic_cast<P::CoalesceExprContext *>(c))
    return binary(x, "??");
  llvm_unreachable("expression alternative not handled");
}

ExprPtr ASTBuilder::primary(P::PrimaryContext *c) {
  SMRange r = range(c);
  DepthGuard guard(depth, r.Start);
  if (auto *x = dynamic_cast<P::IntLitContext *>(c)) {
    int64_t value = 0;
    if (llvm::StringRef(x->getText()).getAsInteger(10, value)) {
      error(r.Start) << "integer literal '" << x->getText()
                     << "' does not fit in 64 bits";
      value = 0;
    }
    return std::make_unique<IntLitExpr>(value, r);
  }
  if (auto *x = dynamic_cast<P::StringLitContext *>(c))
    return std::make_unique<StringLitExpr>(unquote(x->STRING()), r);
  if (dynamic_cast<P::BoolLitContext *>(c))
    return std::make_unique<BoolLitExpr>(c->getText() == "true", r);
  if (auto *x = dynamic_cast<P::CallExprContext *>(c)) {
    std::vector<ExprPtr> args;
    for (auto *a : x->expr())
      args.push_back(expr(a));
    return std::make_unique<CallExpr>(ident(x->name()), std::move(args), r);
  }
  if (auto *x = dynamic_cast<P::NameRefContext *>(c))
    return std::make_unique<NameRefExpr>(x->getText(), r);
  if (auto *x = dynamic_cast<P::ParenExprContext *>(c))
    return expr(x->expr());
  if (auto *x = dynamic_cast<P::ComprehensionContext *>(c))
    return std::make_unique<ComprehensionExpr>(
        expr(x->expr(0)), ident(x->name()), expr(x->expr(1)), r);
  auto *x = static_cast<P::ListLitContext *>(c);
  std::vector<ExprPtr> elements;
  for (auto *e : x->expr())
    elements.push_back(expr(e));
  return std::make_unique<ListLitExpr>(std::move(elements), r);
}

/// Parses `{expr}` placeholders of a name template with a second ANTLR
/// parser over the placeholder text, mapping its locations back into the
/// string literal. Escapes are not allowed in templates, so byte offsets in
/// the literal are offsets in the source.
NameTemplate ASTBuilder::nameTemplate(antlr4::tree::TerminalNode *t) {
  NameTemplate tmpl;
  tmpl.range = range(t);
  const char *bodyStart = tmpl.range.Start.getPointer() + 1;
  std::string text = t->getText();
  llvm::StringRef body = llvm::StringRef(text).drop_front().drop_back();
  tmpl.spelling = body.str();
  if (body.contains('\\')) {
    error(tmpl.range.Start) << "escape sequences are not allowed in names";
    return tmpl;
  }
  size_t pos = 0;
  while (pos < body.size()) {
    size_t open = body.find('{', pos);
    size_t close = body.find('}', pos);
    if (close < open) {
      error(llvm::SMLoc::getFromPointer(bodyStart + close))
          << "unmatched '}' in name";
      return tmpl;
    }
    if (open == llvm::StringRef::npos) {
      tmpl.segments.push_back({body.substr(pos).str(), nullptr});
      break;
    }
    if (open > pos)
      tmpl.segments.push_back({body.substr(pos, open - pos).str(), nullptr});
    close = body.find('}', open);
    if (close == llvm::StringRef::npos) {
      error(llvm::SMLoc::getFromPointer(bodyStart + open))
          << "unterminated '{' in name";
      return tmpl;
    }
    llvm::StringRef inner = body.slice(open + 1, close);
    const char *innerStart = bodyStart + open + 1;
    if (inner.trim().empty()) {
      error(llvm::SMLoc::getFromPointer(bodyStart + open))
          << "empty '{}' in name";
      return tmpl;
    }
    // Parse the placeholder on its own; map its token positions (which are
    // byte offsets, as templates are ASCII) into the source buffer.
    antlr4::ANTLRInputStream input(inner.str());
    mdlgen::MDLLexer lexer(&input);
    antlr4::CommonTokenStream tokens(&lexer);
    mdlgen::MDLParser parser(&tokens);
    struct InnerListener : antlr4::BaseErrorListener {
      const char *start;
      ASTBuilder *builder;
      mlir::InFlightDiagnostic (ASTBuilder::*err)(llvm::SMLoc);
      bool failed = false;
      void syntaxError(antlr4::Recognizer *, antlr4::Token *tok, size_t,
                       size_t col, const std::string &msg,
                       std::exception_ptr) override {
        if (failed)
          return;
        failed = true;
        size_t off = tok && tok->getStartIndex() != INVALID_INDEX
                         ? tok->getStartIndex()
                         : col;
        (builder->*err)(llvm::SMLoc::getFromPointer(start + off))
            << "in name placeholder: " << rewrite(msg);
      }
    } listener;
    listener.start = innerStart;
    listener.builder = this;
    listener.err = &ASTBuilder::error;
    lexer.removeErrorListeners();
    parser.removeErrorListeners();
    lexer.addErrorListener(&listener);
    parser.addErrorListener(&listener);
    P::ExprContext *tree = parser.expr();
    if (!listener.failed && tokens.LA(1) != antlr4::Token::EOF) {
      listener.failed = true;
      error(llvm::SMLoc::getFromPointer(innerStart +
                                        tokens.LT(1)->getStartIndex()))
          << "unexpected text in name placeholder";
    }
    if (listener.failed)
      return tmpl;
    SourceIndex innerIndex(llvm::StringRef(innerStart, inner.size()));
    ASTBuilder inner2(sm, ctx, innerIndex);
    inner2.depth = depth;
    tmpl.segments.push_back({"", inner2.expr(tree)});
    errorCount += inner2.errorCount;
    pos = close + 1;
  }
  return tmpl;
}

//===----------------------------------------------------------------------===//
// Modules and members
//===----------------------------------------------------------------------===//

std::unique_ptr<ModuleDecl> ASTBuilder::module(P::ModuleDeclContext *c) {
  auto decl = std::make_unique<ModuleDecl>(ident(c->name()), false, range(c));
  for (auto *p : c->moduleParam())
    decl->params.push_back(ModuleParam{ident(p->name()), type(p->typeRef()),
                                       p->expr() ? expr(p->expr()) : nullptr,
                                       range(p)});
  members(c->member(), decl->members);
  return decl;
}

std::unique_ptr<ModuleDecl> ASTBuilder::model(P::ModelDeclContext *c) {
  auto decl = std::make_unique<ModuleDecl>(ident(c->name(0)), true, range(c));
  if (c->name().size() > 1)
    decl->base = ident(c->name(1));
  members(c->member(), decl->members);
  return decl;
}

void ASTBuilder::members(const std::vector<P::MemberContext *> &cs,
                         std::vector<MemberPtr> &out) {
  for (auto *m : cs) {
    if (auto *cfg = m->configBlock()) {
      std::vector<std::string> roots;
      for (auto *s : cfg->STRING())
        roots.push_back(unquote(s));
      // Keep config entries and requires in source order.
      for (auto *child : cfg->children) {
        if (auto *e = dynamic_cast<P::ConfigEntryContext *>(child)) {
          auto c = std::make_unique<ConfigMember>(
              ident(e->name()), type(e->typeRef()), expr(e->expr(0)),
              range(e));
          c->roots = roots;
          if (e->expr().size() > 1)
            c->detect = expr(e->expr(1));
          out.push_back(std::move(c));
        }
        else if (auto *rq = dynamic_cast<P::RequireDeclContext *>(child))
          out.push_back(require(rq));
      }
      continue;
    }
    out.push_back(member(m));
  }
}

std::unique_ptr<LetMember> ASTBuilder::let(P::LetDeclContext *c) {
  std::optional<Type> t;
  if (c->typeRef())
    t = type(c->typeRef());
  return std::make_unique<LetMember>(ident(c->name()), std::move(t),
                                     expr(c->expr()), range(c));
}

std::unique_ptr<RequireMember> ASTBuilder::require(P::RequireDeclContext *c) {
  return std::make_unique<RequireMember>(expr(c->expr()), unquote(c->STRING()),
                                         range(c));
}

Shape ASTBuilder::shape(P::ShapeContext *c) {
  Shape s;
  for (auto *a : c->shapeAxis()) {
    ShapeAxis axis;
    if (auto *single = dynamic_cast<P::SingleAxisContext *>(a))
      axis.push_back(ident(single->name()));
    else
      for (auto *n : static_cast<P::ProductAxisContext *>(a)->name())
        axis.push_back(ident(n));
    s.push_back(std::move(axis));
  }
  return s;
}

ParallelStyle ASTBuilder::style(P::ParallelStyleContext *c) {
  ParallelStyle s;
  s.range = range(c);
  if (auto *x = dynamic_cast<P::ColumnStyleContext *>(c)) {
    s.kind = ParallelStyle::Column;
    s.dim = ident(x->name());
  } else if (auto *x = dynamic_cast<P::RowStyleContext *>(c)) {
    s.kind = ParallelStyle::Row;
    s.dim = ident(x->name());
  } else if (auto *x = dynamic_cast<P::VocabStyleContext *>(c)) {
    s.kind = ParallelStyle::Vocab;
    s.dim = ident(x->name());
  } else if (auto *x = dynamic_cast<P::ShardStyleContext *>(c)) {
    s.kind = ParallelStyle::Shard;
    s.dim = ident(x->name());
  } else {
    s.kind = ParallelStyle::Replicated;
  }
  return s;
}

ModuleCall ASTBuilder::call(P::ModuleCallContext *c) {
  ModuleCall mc;
  mc.callee = ident(c->name());
  mc.range = range(c);
  for (auto *a : c->argument()) {
    Argument arg;
    if (a->name())
      arg.name = ident(a->name());
    arg.value = expr(a->expr());
    mc.args.push_back(std::move(arg));
  }
  return mc;
}

InstanceExpr ASTBuilder::instanceExpr(P::InstanceExprContext *c) {
  InstanceExpr ie;
  ie.range = range(c);
  if (auto *d = dynamic_cast<P::DirectInstanceContext *>(c)) {
    ie.arms.push_back({nullptr, range(d), call(d->moduleCall())});
    return ie;
  }
  auto *m = static_cast<P::MatchInstanceContext *>(c);
  ie.scrutinee = expr(m->expr());
  for (auto *arm : m->matchArm()) {
    ExprPtr pattern;
    if (auto *v = dynamic_cast<P::ValuePatternContext *>(arm->matchPattern()))
      pattern = expr(v->expr());
    ie.arms.push_back(
        {std::move(pattern), range(arm->matchPattern()), call(arm->moduleCall())});
  }
  return ie;
}

MemberPtr ASTBuilder::member(P::MemberContext *c) {
  if (auto *x = c->deployDecl()) {
    std::vector<DeployMember::Axis> axes;
    for (auto *a : x->deployAxis()) {
      DeployMember::Axis axis{ident(a->name()), {}};
      for (auto *v : a->INT()) {
        int64_t value = 0;
        if (llvm::StringRef(v->getText()).getAsInteger(10, value))
          error(range(v).Start) << "integer literal '" << v->getText()
                                << "' does not fit in 64 bits";
        axis.values.push_back(value);
      }
      axes.push_back(std::move(axis));
    }
    return std::make_unique<DeployMember>(ident(x->name()), std::move(axes),
                                          range(x));
  }
  if (auto *x = c->exampleDecl()) {
    std::vector<std::pair<std::string, SMRange>> paths;
    for (auto *s : x->STRING())
      paths.push_back({unquote(s), range(s)});
    return std::make_unique<ExampleMember>(std::move(paths), range(x));
  }
  if (auto *x = c->servesDecl()) {
    std::vector<std::pair<std::string, SMRange>> values;
    for (auto *s : x->STRING())
      values.push_back({unquote(s), range(s)});
    return std::make_unique<ServesMember>(ident(x->name()), std::move(values),
                                          range(x));
  }
  if (auto *x = c->letDecl())
    return let(x);
  if (auto *x = c->requireDecl())
    return require(x);
  if (auto *x = c->dtypeDecl())
    return std::make_unique<DTypeDefaultMember>(expr(x->expr()), range(x));
  if (auto *x = c->dimDecl()) {
    if (auto *f = dynamic_cast<P::FactoredDimContext *>(x)) {
      std::vector<Ident> factors;
      for (size_t i = 1; i < f->name().size(); ++i)
        factors.push_back(ident(f->name(i)));
      return std::make_unique<DimMember>(ident(f->name(0)), nullptr,
                                         std::move(factors), range(x));
    }
    auto *s = static_cast<P::SizedDimContext *>(x);
    return std::make_unique<DimMember>(ident(s->name()), expr(s->expr()),
                                       std::vector<Ident>{}, range(x));
  }
  if (auto *x = c->paramDecl()) {
    auto p = std::make_unique<ParamMember>(range(x));
    p->name = ident(x->name());
    if (x->expertIndex())
      p->expertDim = ident(x->expertIndex()->name());
    p->shape = shape(x->shape());
    if (x->dtypeName())
      p->dtype = ident(x->dtypeName()->name());
    if (x->parallelStyle())
      p->style = style(x->parallelStyle());
    if (x->condition())
      p->cond = expr(x->condition()->expr());
    return p;
  }
  if (auto *x = c->linearDecl()) {
    auto l = std::make_unique<LinearMember>(range(x));
    l->name = ident(x->name());
    if (x->expertIndex())
      l->expertDim = ident(x->expertIndex()->name());
    l->in = shape(x->shape(0));
    l->out = shape(x->shape(1));
    if (x->dtypeName())
      l->dtype = ident(x->dtypeName()->name());
    l->style = style(x->parallelStyle());
    if (auto *b = x->biasClause()) {
      l->hasBias = true;
      l->biasRange = range(b);
      if (b->expr())
        l->biasCond = expr(b->expr());
    }
    if (auto *s = x->scaleClause())
      l->scaleBlock = expr(s->expr());
    if (auto *q = x->mxfp4Clause()) {
      l->mxfp4 = true;
      l->mxfp4Range = range(q);
      if (q->expr())
        l->mxfp4Cond = expr(q->expr());
    }
    if (x->condition())
      l->cond = expr(x->condition()->expr());
    return l;
  }
  if (auto *x = c->instanceDecl())
    return std::make_unique<InstanceMember>(
        ident(x->name()), instanceExpr(x->instanceExpr()),
        x->condition() ? expr(x->condition()->expr()) : nullptr, range(x));
  if (auto *x = c->stackDecl())
    return std::make_unique<StackMember>(ident(x->name(0)), expr(x->expr()),
                                         ident(x->name(1)),
                                         instanceExpr(x->instanceExpr()),
                                         range(x));
  if (auto *x = c->pipelineDecl()) {
    auto p = std::make_unique<PipelineMember>(range(x));
    for (auto *e : x->pipelineEntry()) {
      if (auto *f = dynamic_cast<P::FirstStageContext *>(e))
        for (auto *n : f->name())
          p->first.push_back(ident(n));
      else if (auto *l = dynamic_cast<P::LastStageContext *>(e))
        for (auto *item : l->lastItem()) {
          p->last.push_back(ident(item->name(0)));
          if (item->name().size() > 1)
            p->lastFallbacks.push_back(
                {ident(item->name(0)), ident(item->name(1))});
        }
      else {
        auto *s = static_cast<P::StagedStackContext *>(e);
        if (p->staged)
          error(range(s).Start) << "a pipeline has one staged stack";
        p->staged = ident(s->name());
      }
    }
    return p;
  }
  auto *x = c->needsDecl();
  std::optional<std::string> fallback;
  if (x->STRING())
    fallback = unquote(x->STRING());
  return std::make_unique<NeedsMember>(ident(x->name()), std::move(fallback),
                                       range(x));
}

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

AxisTerm ASTBuilder::axisTerm(P::AxisTermContext *c) {
  AxisTerm t;
  t.range = range(c);
  DepthGuard guard(depth, t.range.Start);
  if (auto *d = dynamic_cast<P::DimTermContext *>(c)) {
    t.kind = AxisTerm::Dim;
    t.dim = ident(d->name());
  } else if (auto *u = dynamic_cast<P::UnitTermContext *>(c)) {
    t.kind = AxisTerm::Unit;
    if (u->getText() != "1")
      error(t.range.Start) << "a number in a layout must be 1 (a unit axis)";
  } else if (auto *p = dynamic_cast<P::PartsTermContext *>(c)) {
    t.kind = AxisTerm::Parts;
    for (auto *part : p->part()) {
      LayoutPart lp;
      lp.range = range(part);
      if (auto *g = dynamic_cast<P::GroupPartContext *>(part)) {
        lp.shape = axisProduct(g->axisTerm());
        t.parts.push_back(std::move(lp));
        continue;
      }
      auto *named = static_cast<P::NamedPartContext *>(part);
      lp.param = qualified(named->qualifiedName());
      if (auto *ps = named->partShape()) {
        if (auto *single = dynamic_cast<P::SinglePartShapeContext *>(ps))
          lp.shape.push_back(axisTerm(single->axisTerm()));
        else
          lp.shape = axisProduct(
              static_cast<P::ProductPartShapeContext *>(ps)->axisTerm());
      }
      t.parts.push_back(std::move(lp));
    }
  } else {
    return axisTerm(static_cast<P::ParenTermContext *>(c)->axisTerm());
  }
  return t;
}

AxisProduct
ASTBuilder::axisProduct(const std::vector<P::AxisTermContext *> &cs) {
  AxisProduct product;
  for (auto *c : cs)
    product.push_back(axisTerm(c));
  return product;
}

TensorExpr ASTBuilder::tensorExpr(P::TensorExprContext *c) {
  TensorExpr t;
  t.range = range(c);
  if (c->qualifiedName())
    t.param = qualified(c->qualifiedName());
  for (auto *a : c->axisExpr()) {
    if (auto *s = dynamic_cast<P::SimpleAxisContext *>(a))
      t.axes.push_back({axisTerm(s->axisTerm())});
    else
      t.axes.push_back(axisProduct(
          static_cast<P::ProductAxisExprContext *>(a)->axisTerm()));
  }
  return t;
}

LayoutEntryPtr ASTBuilder::layoutEntry(P::LayoutEntryContext *c) {
  SMRange r = range(c);
  if (auto *x = dynamic_cast<P::TensorEntryContext *>(c)) {
    auto e = std::make_unique<TensorEntry>(r);
    e->name = nameTemplate(x->STRING());
    if (auto *f = x->forClause()) {
      e->forStack = ident(f->name(0));
      e->forVar = ident(f->name(1));
    }
    e->tensor = tensorExpr(x->tensorExpr());
    for (auto *o : x->tensorOption()) {
      TensorOption opt;
      opt.range = range(o);
      if (auto *c = dynamic_cast<P::CopyOptionContext *>(o)) {
        opt.kind = TensorOption::Copy;
        if (c->expr())
          opt.value = expr(c->expr());
      } else if (dynamic_cast<P::ZeroOptionContext *>(o)) {
        opt.kind = TensorOption::Zero;
      } else if (auto *off = dynamic_cast<P::OffsetOptionContext *>(o)) {
        opt.kind = TensorOption::Offset;
        opt.value = expr(off->expr());
      } else if (dynamic_cast<P::NegExpOptionContext *>(o)) {
        opt.kind = TensorOption::NegExp;
      } else if (auto *dt = dynamic_cast<P::DtypeOptionContext *>(o)) {
        opt.kind = TensorOption::DType;
        opt.name = ident(dt->dtypeName()->name());
      } else if (auto *v = dynamic_cast<P::ViewOptionContext *>(o)) {
        opt.kind = TensorOption::View;
        for (auto *d : v->expr())
          opt.shape.push_back(expr(d));
      } else if (auto *s = dynamic_cast<P::SplitOptionContext *>(o)) {
        opt.kind = TensorOption::Split;
        if (llvm::StringRef(s->INT()->getText()).getAsInteger(10, opt.axis))
          error(opt.range.Start) << "axis number too large";
        if (s->name())
          opt.name = ident(s->name());
      } else {
        auto *on = static_cast<P::OnOptionContext *>(o);
        opt.kind = TensorOption::On;
        opt.name = ident(on->name());
      }
      e->options.push_back(std::move(opt));
    }
    if (x->whenClause())
      e->when = expr(x->whenClause()->expr());
    return e;
  }
  if (auto *x = dynamic_cast<P::MountEntryContext *>(c)) {
    auto e = std::make_unique<MountEntry>(r);
    e->member = ident(x->name(0));
    if (x->name().size() > 1)
      e->indexVar = ident(x->name(1));
    e->path = nameTemplate(x->STRING());
    if (x->whenClause())
      e->when = expr(x->whenClause()->expr());
    return e;
  }
  if (auto *x = dynamic_cast<P::ShardEntryContext *>(c)) {
    auto e = std::make_unique<ShardEntry>(r);
    for (auto *q : x->qualifiedName())
      e->params.push_back(qualified(q));
    e->dim = ident(x->name(0));
    if (x->name().size() > 1)
      e->axis = ident(x->name(1));
    e->replicate = x->replicateClause() != nullptr;
    if (x->whenClause())
      e->when = expr(x->whenClause()->expr());
    return e;
  }
  if (auto *x = dynamic_cast<P::DerivedEntryContext *>(c)) {
    auto fill = [&](auto &e) {
      if (auto *rc = x->recomputeClause()) {
        e.hasRecompute = true;
        for (auto *n : rc->name())
          e.recompute.push_back(ident(n));
      }
      if (x->whenClause())
        e.when = expr(x->whenClause()->expr());
    };
    // One the spec says how to compute is a tensor of the layout.
    if (x->tensorExpr()) {
      auto e = std::make_unique<TensorEntry>(r);
      e->derived = true;
      e->name = nameTemplate(x->STRING());
      e->tensor = tensorExpr(x->tensorExpr());
      fill(*e);
      return e;
    }
    auto e = std::make_unique<DerivedEntry>(r);
    e->name = unquote(x->STRING());
    e->nameRange = range(x->STRING());
    for (auto *q : x->qualifiedName())
      e->sources.push_back(qualified(q));
    fill(*e);
    return e;
  }
  if (auto *x = dynamic_cast<P::BufferEntryContext *>(c)) {
    auto e = std::make_unique<BufferEntry>(r);
    e->name = unquote(x->STRING());
    e->nameRange = range(x->STRING());
    if (x->whenClause())
      e->when = expr(x->whenClause()->expr());
    return e;
  }
  if (auto *x = dynamic_cast<P::ChoiceDefaultContext *>(c))
    return std::make_unique<ChoiceDefaultEntry>(ident(x->name()),
                                                expr(x->expr()), r);
  auto *x = static_cast<P::LayoutLetContext *>(c);
  return std::make_unique<LayoutLetEntry>(let(x->letDecl()), r);
}

std::unique_ptr<LayoutDecl> ASTBuilder::layout(P::LayoutDeclContext *c) {
  auto decl = std::make_unique<LayoutDecl>(ident(c->name(0)),
                                           ident(c->name(1)), range(c));
  if (c->STRING())
    decl->mount = nameTemplate(c->STRING());
  for (auto *e : c->layoutEntry())
    decl->entries.push_back(layoutEntry(e));
  return decl;
}

std::unique_ptr<BackendDecl> ASTBuilder::backend(P::BackendDeclContext *c) {
  auto decl = std::make_unique<BackendDecl>(ident(c->name(0)), range(c));
  if (c->name().size() > 1)
    decl->base = ident(c->name(1));
  for (auto *e : c->backendEntry()) {
    BackendEntry be;
    be.range = range(e);
    if (auto *m = dynamic_cast<P::MeshEntryContext *>(e)) {
      be.kind = BackendEntry::Mesh;
      for (auto *n : m->name())
        be.names.push_back(ident(n));
    } else if (auto *cl = dynamic_cast<P::ClassEntryContext *>(e)) {
      be.kind = BackendEntry::Class;
      // A class for the modules of one name is keyed "module:<name>".
      auto strings = cl->STRING();
      be.name = cl->name() ? ident(cl->name())
                           : Ident{"module:" + unquote(strings.front()),
                                   range(strings.front())};
      be.className = unquote(strings.back());
      for (auto *prop : cl->classProperty())
        be.properties.emplace_back(ident(prop->name()), expr(prop->expr()));
    } else if (auto *ch = dynamic_cast<P::ChoiceEntryContext *>(e)) {
      be.kind = BackendEntry::Choice;
      be.name = ident(ch->name());
      for (auto *s : ch->STRING())
        be.options.push_back({unquote(s), range(s)});
    } else if (auto *cap = dynamic_cast<P::CapabilityEntryContext *>(e)) {
      be.kind = BackendEntry::Capability;
      be.name = ident(cap->name());
      be.value = expr(cap->expr());
    } else if (auto *l = dynamic_cast<P::BackendLetContext *>(e)) {
      be.kind = BackendEntry::Let;
      be.let = let(l->letDecl());
    } else {
      be.kind = BackendEntry::Require;
      be.require =
          require(static_cast<P::BackendRequireContext *>(e)->requireDecl());
    }
    decl->entries.push_back(std::move(be));
  }
  return decl;
}

std::unique_ptr<File> ASTBuilder::build(P::FileContext *c) {
  auto file = std::make_unique<File>();
  for (auto *i : c->importDecl())
    file->imports.push_back(Import{unquote(i->STRING()), range(i->STRING())});
  for (auto *d : c->topDecl()) {
    if (auto *m = d->moduleDecl())
      file->decls.push_back(module(m));
    else if (auto *m = d->modelDecl())
      file->decls.push_back(model(m));
    else if (auto *l = d->layoutDecl())
      file->decls.push_back(layout(l));
    else
      file->decls.push_back(backend(d->backendDecl()));
  }
  return file;
}

/// Finds the first byte that is not valid UTF-8, so that the lexer, which
/// decodes its input, never sees one.
const char *findInvalidUTF8(llvm::StringRef text) {
  const auto *p = reinterpret_cast<const llvm::UTF8 *>(text.begin());
  const auto *end = reinterpret_cast<const llvm::UTF8 *>(text.end());
  while (p < end) {
    unsigned len = llvm::getNumBytesForUTF8(*p);
    if (p + len > end || !llvm::isLegalUTF8Sequence(p, p + len))
      return reinterpret_cast<const char *>(p);
    p += len;
  }
  return nullptr;
}

/// Finds a block comment that never ends.
const char *findUnterminatedComment(llvm::StringRef text) {
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '"') { // skip string literals
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (text[i] == '/' && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n')
        ++i;
    } else if (text[i] == '/' && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      if (end == llvm::StringRef::npos)
        return text.data() + i;
      i = end + 1;
    }
  }
  return nullptr;
}

/// Finds the token at which the (recursive) ANTLR parser would nest more
/// than kMaxNestingDepth deep, before it sees the tokens. The measure is
/// conservative: open brackets, plus the `?` and `??` of each bracket level
/// since its last `,` or `;` (both are right-associative: each nests the
/// rest), plus the current run of prefix operators (`!`, `-`, and the
/// `list <` of nested list types).
antlr4::Token *findTooDeep(const std::vector<antlr4::Token *> &tokens) {
  std::vector<unsigned> conditionals = {0};
  unsigned total = 0, run = 0;
  for (antlr4::Token *tok : tokens) {
    std::string t = tok->getText();
    if (t == "(" || t == "[" || t == "{") {
      conditionals.push_back(0);
      run = 0;
    } else if (t == ")" || t == "]" || t == "}") {
      if (conditionals.size() > 1) {
        total -= conditionals.back();
        conditionals.pop_back();
      }
      run = 0;
    } else if (t == "," || t == ";") {
      total -= conditionals.back();
      conditionals.back() = 0;
      run = 0;
    } else if (t == "?" || t == "??") {
      ++conditionals.back();
      ++total;
      run = 0;
    } else if (t == "!" || t == "-" || t == "list" || t == "<") {
      ++run;
    } else {
      run = 0;
    }
    if (conditionals.size() - 1 + total + run > kMaxNestingDepth)
      return tok;
  }
  return nullptr;
}

} // namespace

std::unique_ptr<File> mdl::parseFile(llvm::SourceMgr &sourceMgr,
                                     unsigned bufferId,
                                     mlir::MLIRContext &context) {
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(bufferId);
  llvm::StringRef text = buffer->getBuffer();
  auto located = [&](const char *p) {
    return toLocation(sourceMgr, context, llvm::SMLoc::getFromPointer(p));
  };
  if (const char *bad = findInvalidUTF8(text)) {
    mlir::emitError(located(bad)) << "invalid UTF-8 in source file";
    return nullptr;
  }
  if (const char *comment = findUnterminatedComment(text)) {
    mlir::emitError(located(comment)) << "unterminated /* comment";
    return nullptr;
  }
  SourceIndex index(text);
  try {
    antlr4::ANTLRInputStream input(text.str());
    input.name = buffer->getBufferIdentifier().str();
    mdlgen::MDLLexer lexer(&input);
    antlr4::CommonTokenStream tokens(&lexer);
    DiagnosticErrorListener listener(sourceMgr, bufferId, context, index);
    lexer.removeErrorListeners();
    lexer.addErrorListener(&listener);
    tokens.fill();
    if (antlr4::Token *deep = findTooDeep(tokens.getTokens())) {
      listener.flush();
      mlir::emitError(located(index.loc(deep->getStartIndex()).getPointer()))
          << "expression nested more than " << kMaxNestingDepth << " deep";
      return nullptr;
    }
    mdlgen::MDLParser parser(&tokens);
    parser.removeErrorListeners();
    parser.addErrorListener(&listener);
    P::FileContext *tree = parser.file();
    listener.flush();
    if (listener.errorCount)
      return nullptr;
    ASTBuilder builder(sourceMgr, context, index);
    std::unique_ptr<File> file;
    try {
      file = builder.build(tree);
    } catch (const TooDeep &e) {
      mlir::emitError(toLocation(sourceMgr, context, e.loc))
          << "expression nested more than " << kMaxNestingDepth << " deep";
      return nullptr;
    }
    if (builder.errorCount)
      return nullptr;
    file->path = buffer->getBufferIdentifier().str();
    file->bufferId = bufferId;
    return file;
  } catch (const std::exception &e) {
    // The ANTLR runtime should not throw past its error strategy; if it does,
    // it is still an error about this input, not a crash.
    mlir::emitError(located(text.begin()))
        << "cannot parse this file: " << e.what();
    return nullptr;
  }
}
