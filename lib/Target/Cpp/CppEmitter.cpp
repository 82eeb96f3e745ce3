//===- CppEmitter.cpp - C++ for a model and a backend ---------------------===//
//
// Each expression region becomes a static function `Value fN(Eval &)`; the
// declarations (built by the shared builder, Declarations.h, which the
// compiler uses too) become code that fills the runtime's structs with the
// same values, naming those functions.
//
//===----------------------------------------------------------------------===//

#include "mdl/Target/Cpp/CppEmitter.h"

#include "mdl/Evaluate/Declarations.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Model/Generated.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <fmt/format.h>

#include <functional>

using namespace mlir;
using namespace mdl;

namespace {

std::string quote(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += llvm::formatv("\\x{0:x-2}", unsigned(c)).str();
      else
        out += c;
    }
  }
  return out + "\"";
}

std::string dtypeExpr(DType d) {
  std::string name(specName(d));
  static const std::pair<StringRef, StringRef> kNames[] = {
      {"bf16", "BF16"},     {"f16", "F16"},       {"f32", "F32"},
      {"f64", "F64"},       {"i64", "I64"},       {"i32", "I32"},
      {"i16", "I16"},       {"i8", "I8"},         {"u8", "U8"},
      {"bool", "Bool"},     {"f8e4m3", "F8E4M3"}, {"f8e5m2", "F8E5M2"}};
  for (auto [spec, enumerator] : kNames)
    if (spec == name)
      return "mdl::DType::" + enumerator.str();
  return "mdl::DType::BF16";
}

/// `mdl::MeshAxis::EP`.
std::string meshAxisExpr(MeshAxis a) {
  return "mdl::MeshAxis::" + StringRef(meshAxisName(a)).upper();
}

/// `mdl::TensorParallelStyle::Column`.
std::string styleExpr(TensorParallelStyle s) {
  return "mdl::TensorParallelStyle::" +
         llvm::convertToCamelFromSnakeCase(tensorParallelStyleName(s),
                                           /*capitalizeFirst=*/true);
}

/// `mdl::ModuleRole::ColumnNorm`, or `std::nullopt`.
std::string roleExpr(std::optional<ModuleRole> r) {
  if (!r)
    return "std::nullopt";
  return "mdl::ModuleRole::" +
         llvm::convertToCamelFromSnakeCase(moduleRoleName(*r),
                                           /*capitalizeFirst=*/true);
}

std::string binaryOp(BinaryKind k) {
  switch (k) {
  case BinaryKind::add: return "Add";
  case BinaryKind::sub: return "Sub";
  case BinaryKind::mul: return "Mul";
  case BinaryKind::div: return "Div";
  case BinaryKind::mod: return "Mod";
  case BinaryKind::concat: return "Concat";
  case BinaryKind::lt: return "Lt";
  case BinaryKind::le: return "Le";
  case BinaryKind::gt: return "Gt";
  case BinaryKind::ge: return "Ge";
  case BinaryKind::eq: return "Eq";
  case BinaryKind::ne: return "Ne";
  case BinaryKind::and_: return "And";
  case BinaryKind::or_: return "Or";
  }
  return "Add";
}

std::string stringList(ArrayRef<std::string> items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + quote(items[i]);
  return out + "}";
}

/// Writes each expression as a function `fN` and prints the declarations
/// the shared builder makes as code that builds them.
class Emitter : public ExprFactory {
public:
  Emitter(ModuleDeclOp model, BackendOp backend, const CppEmitOptions &options)
      : model(model), backend(backend), options(options),
        top(getTopModule(model)) {}

  LogicalResult run(raw_ostream &header, raw_ostream &source);
  rt::Expr make(Region &region, unsigned result) override;

private:
  // Expressions.
  unsigned fn(Region &region, unsigned result = 0);
  std::string expr(Value v);
  unsigned letFn(LetOp let);

  // Declarations.
  static std::string call(const rt::Expr &e);
  static std::string axes(const std::vector<std::vector<std::string>> &axes);
  std::string term(const rt::TermDecl &t);
  std::string namePieces(const std::vector<rt::NamePiece> &pieces);
  void printModule(const rt::ModuleDecl &m, raw_ostream &os);
  void printLayout(const rt::LayoutDecl &l, raw_ostream &os);
  void printBackend(const rt::BackendDecl &b, StringRef var, raw_ostream &os);

  ModuleDeclOp model;
  BackendOp backend;
  const CppEmitOptions &options;
  ModuleOp top;
  std::string functions;
  unsigned nextFn = 0;
  llvm::DenseMap<Operation *, unsigned> lets;
  /// C++ names of comprehension variables.
  llvm::DenseMap<Value, std::string> locals;
  bool failed = false;
};

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

unsigned Emitter::fn(Region &region, unsigned result) {
  auto yield = cast<YieldOp>(region.front().back());
  unsigned n = nextFn++;
  std::string body = expr(yield.getValues()[result]);
  functions += "static Value f" + std::to_string(n) +
               "(Eval &e) {\n  (void)e;\n  return " + body + ";\n}\n\n";
  return n;
}

unsigned Emitter::letFn(LetOp let) {
  auto it = lets.find(let);
  if (it != lets.end())
    return it->second;
  unsigned n = fn(let.getValue());
  lets[let] = n;
  return n;
}

std::string Emitter::expr(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto it = locals.find(v); it != locals.end())
      return it->second;
    return "e.arg(" + std::to_string(arg.getArgNumber()) + ")";
  }
  Operation *op = v.getDefiningOp();
  return TypeSwitch<Operation *, std::string>(op)
      .Case<ConstantOp>([&](ConstantOp c) {
        std::function<std::string(Attribute)> conv =
            [&](Attribute a) -> std::string {
          if (auto b = dyn_cast<BoolAttr>(a))
            return b.getValue() ? "Value::boolean(true)"
                                : "Value::boolean(false)";
          if (auto i = dyn_cast<IntegerAttr>(a)) {
            if (i.getType().isInteger(1))
              return i.getValue().getBoolValue() ? "Value::boolean(true)"
                                                 : "Value::boolean(false)";
            int64_t x = i.getValue().getSExtValue();
            return "Value::integer(" +
                   (x == INT64_MIN ? std::string("INT64_MIN")
                                   : std::to_string(x) + "LL") +
                   ")";
          }
          if (auto s = dyn_cast<StringAttr>(a))
            return "Value::string(" + quote(s.getValue()) + ")";
          if (auto d = dyn_cast<ElementTypeAttr>(a))
            return "Value::dtypeOf(" + dtypeExpr(toDType(d.getValue())) + ")";
          std::string out = "Value::listOf({";
          bool first = true;
          for (Attribute x : cast<ArrayAttr>(a)) {
            out += (first ? "" : ", ") + conv(x);
            first = false;
          }
          return out + "})";
        };
        return conv(c.getValue());
      })
      .Case<GetOp>([&](GetOp g) -> std::string {
        Operation *decl = lookupValueDecl(g, g.getName());
        if (auto choice = dyn_cast_or_null<ChoiceOp>(decl))
          return "e.choice(" + quote(choice.getSymName()) + ", " +
                 quote(cast<StringAttr>(choice.getOptions()[0]).getValue()) +
                 ")";
        if (auto let = dyn_cast_or_null<LetOp>(decl);
            let && !isa<ModuleDeclOp>(let->getParentOp()))
          return "f" + std::to_string(letFn(let)) + "(e)";
        return "e.get(" + quote(g.getName()) + ")";
      })
      .Case<ContextOp>([&](ContextOp c) {
        return "e.context(" + quote(c.getVar()) + ")";
      })
      .Case<HfOp>([&](HfOp h) {
        return "e.hf(" + quote(h.getPath()) + ", " +
               quote(typeSpelling(h.getType())) + ")";
      })
      .Case<CoalesceOp>([&](CoalesceOp c) {
        return "rt::coalesce(" + expr(c.getValue()) +
               ", [&]() -> Value { return " + expr(c.getFallback()) + "; })";
      })
      .Case<mdl::BinaryOp>([&](mdl::BinaryOp b) -> std::string {
        std::string l = expr(b.getLhs()), r = expr(b.getRhs());
        if (b.getKind() == BinaryKind::and_)
          return "Value::boolean(rt::truthy(e, " + l + ") && rt::truthy(e, " +
                 r + "))";
        if (b.getKind() == BinaryKind::or_)
          return "Value::boolean(rt::truthy(e, " + l + ") || rt::truthy(e, " +
                 r + "))";
        return "rt::bin(e, rt::BinaryOp::" + binaryOp(b.getKind()) + ", " + l +
               ", " + r + ")";
      })
      .Case<NotOp>([&](NotOp n) {
        return "Value::boolean(!rt::truthy(e, " + expr(n.getOperand()) + "))";
      })
      .Case<NegOp>([&](NegOp n) {
        return "rt::neg(e, " + expr(n.getOperand()) + ")";
      })
      .Case<SelectOp>([&](SelectOp s) {
        return "(rt::truthy(e, " + expr(s.getCond()) + ") ? Value(" +
               expr(s.getTrueValue()) + ") : Value(" +
               expr(s.getFalseValue()) + "))";
      })
      .Case<IndexOp>([&](IndexOp x) {
        return "rt::index(e, " + expr(x.getList()) + ", " +
               expr(x.getIndex()) + ")";
      })
      .Case<ContainsOp>([&](ContainsOp c) {
        return "rt::contains(e, " + expr(c.getList()) + ", " +
               expr(c.getValue()) + ")";
      })
      .Case<ListOp>([&](ListOp l) {
        std::string out = "Value::listOf({";
        for (auto [i, x] : llvm::enumerate(l.getElements()))
          out += (i ? ", " : "") + std::string("e.present(") + expr(x) + ")";
        return out + "})";
      })
      .Case<BuiltinOp>([&](BuiltinOp b) {
        std::string out = "rt::builtin(e, " + quote(b.getCallee()) + ", {";
        for (auto [i, x] : llvm::enumerate(b.getArgs()))
          out += (i ? ", " : "") + expr(x);
        return out + "})";
      })
      .Case<ComprehensionOp>([&](ComprehensionOp c) {
        Block &body = c.getBody().front();
        std::string var = "x" + std::to_string(nextFn++);
        locals[body.getArgument(0)] = var;
        auto yield = cast<YieldOp>(body.back());
        return "rt::comprehend(e, " + expr(c.getSource()) +
               ", [&](const Value &" + var + ") -> Value { return " +
               expr(yield.getValues()[0]) + "; })";
      })
      .Case<IsOp>([&](IsOp is) {
        return "Value::boolean(e.is(" + quote(is.getInstance()) + ", " +
               quote(is.getModule()) + "))";
      })
      .Default([&](Operation *o) {
        o->emitError("the C++ emitter cannot translate this operation");
        failed = true;
        return std::string("Value()");
      });
}

//===----------------------------------------------------------------------===//
// Declarations, printed as code that builds them
//===----------------------------------------------------------------------===//

rt::Expr Emitter::make(Region &region, unsigned result) {
  // A let of a layout or a backend is one function, however often read.
  auto let = dyn_cast<LetOp>(region.getParentOp());
  unsigned n = let && !isa<ModuleDeclOp>(let->getParentOp())
                   ? letFn(let)
                   : fn(region, result);
  // Only the number is printed; generated code holds the function.
  return rt::Expr([](rt::Eval &) { return rt::Value(); }, int(n));
}

std::string Emitter::call(const rt::Expr &e) {
  return e ? "f" + std::to_string(e.site()) : "nullptr";
}

std::string Emitter::axes(const std::vector<std::vector<std::string>> &axes) {
  std::string out = "{";
  for (auto [i, axis] : llvm::enumerate(axes))
    out += (i ? ", " : "") + stringList(axis);
  return out + "}";
}

std::string Emitter::term(const rt::TermDecl &t) {
  auto list = [&](const std::vector<rt::TermDecl> &terms) {
    std::string out;
    for (auto [i, c] : llvm::enumerate(terms))
      out += (i ? ", " : "") + term(c);
    return out;
  };
  switch (t.kind) {
  case rt::TermDecl::Atom:
    return "rt::atom(" + quote(t.atom) + ")";
  case rt::TermDecl::Unit:
    return "rt::unit()";
  case rt::TermDecl::Product:
    return "rt::product({" + list(t.children) + "})";
  case rt::TermDecl::Parts: {
    std::string out = "rt::parts({";
    for (auto [i, p] : llvm::enumerate(t.parts))
      out += (i ? ", " : "") + std::string("{") + quote(p.param) + ", {" +
             list(p.shape) + "}}";
    return out + "})";
  }
  }
  return "rt::unit()";
}

std::string Emitter::namePieces(const std::vector<rt::NamePiece> &pieces) {
  static const char *const kKinds[] = {"Text", "Family", "Value", "Index"};
  std::string out = "{";
  for (auto [i, p] : llvm::enumerate(pieces))
    out += (i ? ", " : "") + std::string("{NamePiece::") + kKinds[p.kind] +
           ", " + quote(p.text) + ", " + call(p.value) + "}";
  return out + "}";
}

void Emitter::printModule(const rt::ModuleDecl &m, raw_ostream &os) {
  os << "  {\n    ModuleDecl &m = d.modules.emplace_back();\n";
  os << "    m.name = " << quote(m.name) << ";\n";
  os << "    m.where = " << quote(m.where) << ";\n";
  static const char *const kKinds[] = {"Input", "Config", "Let", "Dim",
                                       "InputDim"};
  for (const rt::ValueDecl &v : m.values)
    os << "    m.values.push_back({" << quote(v.name)
       << ", ValueDecl::" << kKinds[v.kind] << ", " << call(v.expr) << ", "
       << stringList(v.factors) << ", " << quote(v.where) << "});\n";
  for (const rt::ModuleDecl::Detectable &d : m.detectable)
    os << "    m.detectable.push_back({" << quote(d.name) << ", "
       << call(d.candidates) << ", " << stringList(d.keys) << "});\n";
  for (const rt::RequireDecl &r : m.requirements)
    os << "    m.requirements.push_back({" << call(r.cond) << ", "
       << quote(r.message) << ", " << quote(r.where) << "});\n";
  if (m.defaultDType)
    os << "    m.defaultDType = " << call(m.defaultDType) << ";\n";
  for (const rt::ParamDecl &p : m.params) {
    os << "    {\n      ParamDecl &p = m.params.emplace_back();\n";
    os << "      p.name = " << quote(p.name) << ";\n";
    if (p.linear) {
      os << "      p.linear = true;\n";
      os << "      p.outAxes = " << p.outAxes << ";\n";
    }
    os << "      p.axes = " << axes(p.axes) << ";\n";
    if (p.linear)
      os << "      p.biasAxes = " << axes(p.biasAxes) << ";\n";
    if (!p.expert.empty())
      os << "      p.expert = " << quote(p.expert) << ";\n";
    if (p.dtype)
      os << "      p.dtype = " << dtypeExpr(*p.dtype) << ";\n";
    if (p.style != TensorParallelStyle::None)
      os << "      p.style = " << styleExpr(p.style) << ";\n";
    if (!p.styleDim.empty()) {
      os << "      p.styleDim = " << quote(p.styleDim) << ";\n";
      os << "      p.styleAtoms = " << stringList(p.styleAtoms) << ";\n";
    }
    if (p.bias) {
      os << "      p.bias = true;\n";
      if (p.biasCond)
        os << "      p.biasCond = " << call(p.biasCond) << ";\n";
    }
    if (p.scaleBlock)
      os << "      p.scaleBlock = " << call(p.scaleBlock) << ";\n";
    if (p.mxfp4) {
      os << "      p.mxfp4 = true;\n";
      if (p.mxfp4Cond)
        os << "      p.mxfp4Cond = " << call(p.mxfp4Cond) << ";\n";
    }
    if (p.cond)
      os << "      p.cond = " << call(p.cond) << ";\n";
    os << "      p.where = " << quote(p.where) << ";\n    }\n";
  }
  for (const rt::ChildDecl &c : m.children) {
    os << "    {\n      ChildDecl &c = m.children.emplace_back();\n";
    os << "      c.name = " << quote(c.name) << ";\n";
    if (c.stack)
      os << "      c.stack = true;\n      c.count = " << call(c.count) << ";\n";
    else if (c.cond)
      os << "      c.cond = " << call(c.cond) << ";\n";
    for (const rt::CaseDecl &k : c.cases) {
      os << "      {\n        CaseDecl &k = c.cases.emplace_back();\n";
      os << "        k.module = " << quote(k.module) << ";\n";
      if (k.guard)
        os << "        k.guard = " << call(k.guard) << ";\n";
      for (const auto &[name, value] : k.args)
        os << "        k.args.push_back({" << quote(name) << ", " << call(value)
           << "});\n";
      os << "      }\n";
    }
    os << "      c.where = " << quote(c.where) << ";\n    }\n";
  }
  if (!m.first.empty() || !m.last.empty() || !m.stages.empty()) {
    os << "    m.first = " << stringList(m.first) << ";\n";
    os << "    m.last = " << stringList(m.last) << ";\n";
  }
  if (!m.stages.empty())
    os << "    m.stages = " << quote(m.stages) << ";\n";
  for (const auto &[wanted, fallback] : m.fallbacks)
    os << "    m.fallbacks.push_back({" << quote(wanted) << ", "
       << quote(fallback) << "});\n";
  for (const rt::NeedDecl &n : m.needs)
    os << "    m.needs.push_back({" << quote(n.capability) << ", "
       << (n.fallback ? "std::string(" + quote(*n.fallback) + ")"
                      : std::string("std::nullopt"))
       << ", " << quote(n.where) << "});\n";
  os << "  }\n";
}

void Emitter::printLayout(const rt::LayoutDecl &l, raw_ostream &os) {
  os << "  {\n    LayoutDecl &l = b.layouts.emplace_back();\n";
  os << "    l.module = " << quote(l.module) << ";\n";
  if (l.mount)
    os << "    l.mount = std::string(" << quote(*l.mount) << ");\n";
  os << "    l.where = " << quote(l.where) << ";\n";
  for (const rt::TensorDecl &t : l.tensors) {
    os << "    {\n      TensorDecl &t = l.tensors.emplace_back();\n";
    os << "      t.name = " << namePieces(t.name) << ";\n";
    if (!t.param.empty())
      os << "      t.param = " << quote(t.param) << ";\n";
    os << "      t.axes = {";
    for (auto [i, axis] : llvm::enumerate(t.axes)) {
      os << (i ? ", " : "") << "{";
      for (auto [j, c] : llvm::enumerate(axis))
        os << (j ? ", " : "") << term(c);
      os << "}";
    }
    os << "};\n";
    if (!t.forStack.empty())
      os << "      t.forStack = " << quote(t.forStack) << ";\n";
    if (t.copy)
      os << "      t.copy = true;\n";
    if (t.zero)
      os << "      t.zero = true;\n";
    if (t.copyIf)
      os << "      t.copyIf = " << call(t.copyIf) << ";\n";
    if (t.offset)
      os << "      t.offset = " << t.offset << ";\n";
    if (t.negExp)
      os << "      t.negExp = true;\n";
    if (t.stored)
      os << "      t.stored = " << dtypeExpr(*t.stored) << ";\n";
    if (!t.view.empty()) {
      os << "      t.view = {";
      for (auto [i, v] : llvm::enumerate(t.view))
        os << (i ? ", " : "") << "{" << v.factor << ", " << stringList(v.atoms)
           << ", " << (v.claim ? "true" : "false") << ", " << quote(v.spelling)
           << "}";
      os << "};\n";
    }
    if (t.split) {
      os << "      t.split = " << *t.split << ";\n";
      if (t.splitBy != rt::TensorDecl().splitBy)
        os << "      t.splitBy = " << meshAxisExpr(t.splitBy) << ";\n";
    }
    if (t.on)
      os << "      t.on = rt::Placement::"
         << (*t.on == rt::Placement::First ? "First" : "Last") << ";\n";
    if (t.when) {
      os << "      t.when = " << call(t.when) << ";\n";
      if (t.whenReadsContext)
        os << "      t.whenReadsContext = true;\n";
    }
    if (t.derived)
      os << "      t.derived = true;\n";
    if (t.hasRecompute)
      os << "      t.hasRecompute = true;\n      t.recompute = "
         << stringList(t.recompute) << ";\n";
    os << "      t.where = " << quote(t.where) << ";\n    }\n";
  }
  for (const rt::MountDecl &m : l.mounts)
    os << "    l.mounts.push_back({" << quote(m.member) << ", " << call(m.when)
       << ", " << namePieces(m.path) << ", " << quote(m.where) << "});\n";
  for (const rt::ShardDecl &s : l.shards)
    os << "    l.shards.push_back({" << stringList(s.params) << ", "
       << quote(s.dim) << ", " << stringList(s.atoms) << ", "
       << meshAxisExpr(s.axis) << ", " << (s.replicate ? "true" : "false")
       << ", " << call(s.when) << ", " << quote(s.where) << "});\n";
  for (const rt::DerivedDecl &d : l.derived)
    os << "    l.derived.push_back({" << quote(d.name) << ", "
       << stringList(d.sources) << ", " << (d.hasRecompute ? "true" : "false")
       << ", " << stringList(d.recompute) << ", " << call(d.when) << ", "
       << quote(d.where) << "});\n";
  for (const rt::BufferDecl &b : l.buffers)
    os << "    l.buffers.push_back({" << quote(b.name) << ", " << call(b.when)
       << ", " << quote(b.where) << "});\n";
  for (const rt::LayoutDecl::ChoiceDefault &c : l.choiceDefaults)
    os << "    l.choiceDefaults.push_back({" << quote(c.choice) << ", "
       << call(c.value) << ", " << quote(c.where) << "});\n";
  os << "  }\n";
}

void Emitter::printBackend(const rt::BackendDecl &b, StringRef var,
                           raw_ostream &os) {
  os << "static BackendDecl " << var << "() {\n  BackendDecl b;\n";
  os << "  b.name = " << quote(b.name) << ";\n";
  for (MeshAxis a : b.mesh)
    os << "  b.mesh.push_back(" << meshAxisExpr(a) << ");\n";
  for (const BackendSetting &s : backendSettings())
    if (b.*s.member)
      os << "  b." << s.field << " = " << call(b.*s.member) << ";\n";
  for (const rt::RequireDecl &r : b.requirements)
    os << "  b.requirements.push_back({" << call(r.cond) << ", "
       << quote(r.message) << ", " << quote(r.where) << "});\n";
  for (const auto &[capability, value] : b.capabilities)
    os << "  b.capabilities.push_back({" << quote(capability) << ", "
       << call(value) << "});\n";
  for (const rt::ChoiceDecl &c : b.choices)
    os << "  b.choices.push_back({" << quote(c.name) << ", "
       << stringList(c.options) << ", " << quote(c.where) << "});\n";
  for (const rt::ClassDecl &c : b.classes) {
    os << "  b.classes.push_back({" << roleExpr(c.role) << ", "
       << quote(c.module) << ", " << quote(c.name) << ", {";
    for (auto [i, p] : llvm::enumerate(c.properties))
      os << (i ? ", " : "") << "{" << quote(p.first) << ", " << quote(p.second)
         << "}";
    os << "}});\n";
  }
  for (const rt::LayoutDecl &l : b.layouts)
    printLayout(l, os);
  os << "  return b;\n}\n\n";
}

/// The header of a model and backend: the entry points of the generated
/// unit, for fmt (braces of the C++ doubled).
constexpr const char *kHeaderTemplate = R"({banner}#ifndef {guard}
#define {guard}

#include "mdl/Runtime/Model/Generated.h"

namespace {ns} {{

/// The model {model} and the backend {backend}, for the runtime.
const mdl::rt::ModelDecl &model();
const mdl::rt::BackendDecl &backend();
/// The HF backend, which checkpoints are read from and written to.
const mdl::rt::BackendDecl &hfBackend();
/// This model and backend as one handle for the runtime's tools.
const mdl::rt::Generated &generated();

/// Instantiates the model for an HF config.json and binds it to the backend.
inline std::unique_ptr<mdl::rt::Binding>
load(const std::string &configPath, const mdl::rt::LoadOptions &options,
     std::string &error) {{
  return mdl::rt::Binding::load(model(), backend(), configPath, options, error);
}}

/// Every reason a parallel configuration is invalid; empty when it is valid.
inline std::vector<std::string>
validate(const mdl::rt::Binding &binding, const mdl::ParallelConfig &config) {{
  return binding.validate(config);
}}

/// The local tensors of one rank, with the slices of parameters they hold.
inline std::vector<mdl::rt::RankTensor>
rankTensors(const mdl::rt::Binding &binding, const mdl::ParallelConfig &config,
            int64_t rank) {{
  return binding.rankTensors(config, rank);
}}

/// The LoRA injection table of one rank, for adapters of rank `r`.
inline std::vector<mdl::rt::LoraTarget>
loraTable(const mdl::rt::Binding &binding, const mdl::ParallelConfig &config,
          int64_t rank, int64_t r = 16) {{
  return mdl::rt::loraTable(binding, config, rank, r);
}}

}} // namespace {ns}

#endif
)";

LogicalResult Emitter::run(raw_ostream &header, raw_ostream &source) {
  std::string modelName = model.getSymName().str();
  std::string backendName = backend.getSymName().str();
  std::string ns = "mdl::gen::" + modelName + "::" + backendName;
  // The form tools recognise as generated code (`^// Code generated .*
  // DO NOT EDIT\.$`).
  std::string banner = "// Code generated by mdlc from " + options.specName +
                       " for backend " + backendName + ". DO NOT EDIT.\n";

  // The declarations, with the expression functions they name.
  DeclarationOptions declOptions{options.specName, options.baseDir};
  FailureOr<rt::ModelDecl> modelDecl =
      buildModelDecl(model, *this, declOptions);
  FailureOr<rt::BackendDecl> backendDecl =
      buildBackendDecl(backend, model, *this, declOptions);
  BackendOp hf =
      dyn_cast_or_null<BackendOp>(SymbolTable::lookupSymbolIn(top, "hf"));
  FailureOr<rt::BackendDecl> hfDecl = rt::BackendDecl();
  if (hf && hf != backend)
    hfDecl = buildBackendDecl(hf, model, *this, declOptions);
  if (mlir::failed(modelDecl) || mlir::failed(backendDecl) ||
      mlir::failed(hfDecl) || failed)
    return failure();
  std::string decls;
  llvm::raw_string_ostream os(decls);
  os << "static ModelDecl buildModel() {\n  ModelDecl d;\n";
  os << "  d.name = " << quote(modelDecl->name) << ";\n";
  os << "  d.spec = " << quote(modelDecl->spec) << ";\n";
  if (!modelDecl->architectures.empty())
    os << "  d.architectures = " << stringList(modelDecl->architectures)
       << ";\n";
  if (!modelDecl->modelTypes.empty())
    os << "  d.modelTypes = " << stringList(modelDecl->modelTypes) << ";\n";
  for (const rt::ModuleDecl &m : modelDecl->modules)
    printModule(m, os);
  os << "  return d;\n}\n\n";
  printBackend(*backendDecl, "buildBackend", os);
  if (hf && hf != backend)
    printBackend(*hfDecl, "buildHfBackend", os);

  std::string guard = "MDL_GEN_" + StringRef(modelName).upper() + "_" +
                      StringRef(backendName).upper() + "_H";
  header << fmt::format(kHeaderTemplate, fmt::arg("banner", banner),
                        fmt::arg("guard", guard), fmt::arg("ns", ns),
                        fmt::arg("model", modelName),
                        fmt::arg("backend", backendName));

  source << banner;
  source << "#include \"" << options.headerName << "\"\n\n";
  source << "namespace " << ns << " {\nnamespace {\n\n";
  source << "using namespace mdl::rt;\n";
  source << "using mdl::rt::Value;\n\n";
  source << functions;
  source << decls;
  source << "} // namespace\n\n";
  source << "const ModelDecl &model() {\n"
            "  static const ModelDecl d = buildModel();\n  return d;\n}\n\n";
  source << "const BackendDecl &backend() {\n"
            "  static const BackendDecl b = buildBackend();\n  return b;\n}\n\n";
  source << "const BackendDecl &hfBackend() {\n";
  if (hf && hf != backend)
    source << "  static const BackendDecl b = buildHfBackend();\n  return b;\n";
  else
    source << "  return backend();\n";
  source << "}\n\n";
  source << "const Generated &generated() {\n"
            "  static const Generated g{model(), backend(), hfBackend()};\n"
            "  return g;\n}\n\n";
  source << "static const Registration registration(generated());\n\n";
  source << "} // namespace " << ns << "\n";
  return success();
}

} // namespace

LogicalResult mdl::emitCpp(ModuleDeclOp model, BackendOp backend,
                           const CppEmitOptions &options, raw_ostream &header,
                           raw_ostream &source) {
  return Emitter(model, backend, options).run(header, source);
}
