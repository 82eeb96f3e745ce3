//===- CppEmitter.cpp - C++ for a model and a backend ---------------------===//
//
// Each expression region becomes a static function `Value fN(Eval &)`; each
// module, layout and backend becomes code that fills the runtime's
// declarations. Dimensions are resolved to their atoms here, once; what
// depends on the config stays in the functions.
//
//===----------------------------------------------------------------------===//

#include "mdl/Target/Cpp/CppEmitter.h"

#include "mdl/Runtime/DType.h"

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

std::string typeSpelling(Type type) {
  if (type.isInteger(64))
    return "int";
  if (type.isInteger(1))
    return "bool";
  if (isa<StringType>(type))
    return "string";
  if (isa<DTypeType>(type))
    return "dtype";
  return "list<" + typeSpelling(cast<ListType>(type).getElementType()) + ">";
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

class Emitter {
public:
  Emitter(ModuleDeclOp model, BackendOp backend, const CppEmitOptions &options)
      : model(model), backend(backend), options(options),
        top(getTopModule(model)) {}

  LogicalResult run(raw_ostream &header, raw_ostream &source);

private:
  // Expressions.
  std::string fn(Region &region, unsigned result = 0);
  std::string fnOrNull(Region &region, unsigned result = 0) {
    return region.empty() ? "nullptr" : fn(region, result);
  }
  std::string expr(Value v);
  std::string letFn(LetOp let);

  // Declarations.
  std::string where(Operation *op);
  std::vector<std::string> atoms(ModuleDeclOp module, StringRef dim);
  std::string axesOf(ModuleDeclOp module, ArrayRef<Attribute> axes);
  void emitModule(ModuleDeclOp m, raw_ostream &os);
  void emitLayout(LayoutOp l, raw_ostream &os);
  std::string term(TermAttr t, ModuleDeclOp scope);
  std::string namePieces(Operation *op, ArrayAttr segments, Region &args,
                         bool indexPiece);
  LogicalResult viewAxes(TensorOp t, ModuleDeclOp module, std::string &out);
  void emitBackend(BackendOp b, StringRef var, raw_ostream &os);
  SmallVector<ModuleDeclOp> reachableModules();

  ModuleDeclOp model;
  BackendOp backend;
  const CppEmitOptions &options;
  ModuleOp top;
  std::string functions;
  unsigned nextFn = 0;
  llvm::DenseMap<Operation *, std::string> lets;
  /// C++ names of comprehension variables.
  llvm::DenseMap<Value, std::string> locals;
  bool failed = false;
};

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

std::string Emitter::fn(Region &region, unsigned result) {
  auto yield = cast<YieldOp>(region.front().back());
  std::string name = "f" + std::to_string(nextFn++);
  std::string body = expr(yield.getValues()[result]);
  functions += "static Value " + name + "(Eval &e) {\n  (void)e;\n  return " +
               body + ";\n}\n\n";
  return name;
}

std::string Emitter::letFn(LetOp let) {
  auto it = lets.find(let);
  if (it != lets.end())
    return it->second;
  std::string name = fn(let.getValue());
  lets[let] = name;
  return name;
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
          return letFn(let) + "(e)";
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
// Declarations
//===----------------------------------------------------------------------===//

std::string Emitter::where(Operation *op) {
  auto loc = dyn_cast<FileLineColLoc>(op->getLoc());
  if (!loc)
    return "";
  std::string file = loc.getFilename().str();
  if (!options.baseDir.empty() &&
      StringRef(file).starts_with(options.baseDir + "/"))
    file = file.substr(options.baseDir.size() + 1);
  return file + ":" + std::to_string(loc.getLine()) + ":" +
         std::to_string(loc.getColumn());
}

std::vector<std::string> Emitter::atoms(ModuleDeclOp module, StringRef dim) {
  std::vector<std::string> out;
  for (StringRef a : getDimAtoms(module, dim))
    out.push_back(a.str());
  return out;
}

/// `{{"G", "P"}, {"H"}}` from axes of dimension symbols.
std::string Emitter::axesOf(ModuleDeclOp module, ArrayRef<Attribute> axes) {
  std::string out = "{";
  for (auto [i, axis] : llvm::enumerate(axes)) {
    std::vector<std::string> names;
    for (Attribute d : cast<ArrayAttr>(axis))
      for (std::string &a :
           atoms(module, cast<FlatSymbolRefAttr>(d).getValue()))
        names.push_back(std::move(a));
    out += (i ? ", " : "") + stringList(names);
  }
  return out + "}";
}

SmallVector<ModuleDeclOp> Emitter::reachableModules() {
  llvm::SetVector<Operation *> found;
  found.insert(model);
  for (size_t i = 0; i < found.size(); ++i)
    found[i]->walk([&](CaseOp c) {
      if (Operation *m = SymbolTable::lookupSymbolIn(top, c.getModule()))
        found.insert(m);
    });
  SmallVector<ModuleDeclOp> out;
  for (Operation *op : found)
    out.push_back(cast<ModuleDeclOp>(op));
  return out;
}

void Emitter::emitModule(ModuleDeclOp m, raw_ostream &os) {
  os << "  {\n    ModuleDecl &m = d.modules.emplace_back();\n";
  os << "    m.name = " << quote(m.getSymName()) << ";\n";
  os << "    m.where = " << quote(where(m)) << ";\n";
  for (Operation &op : m.getBodyBlock()) {
    auto value = [&](StringRef kind, StringRef name, std::string e,
                     ArrayRef<std::string> factors = {}) {
      os << "    m.values.push_back({" << quote(name) << ", ValueDecl::"
         << kind << ", " << e << ", " << stringList(factors) << ", "
         << quote(where(&op)) << "});\n";
    };
    TypeSwitch<Operation *>(&op)
        .Case<InputOp>([&](InputOp in) {
          value("Input", in.getSymName(), fnOrNull(in.getDefaultValue()));
        })
        .Case<ConfigOp>([&](ConfigOp c) {
          value("Config", c.getSymName(), fn(c.getValue()));
          if (c.getDetect().empty())
            return;
          std::vector<std::string> keys;
          c.getValue().walk([&](HfOp h) { keys.push_back(h.getPath().str()); });
          os << "    m.detectable.push_back({" << quote(c.getSymName()) << ", "
             << fn(c.getDetect()) << ", " << stringList(keys) << "});\n";
        })
        .Case<LetOp>([&](LetOp l) {
          value("Let", l.getSymName(), fn(l.getValue()));
        })
        .Case<DimOp>([&](DimOp dim) {
          std::vector<std::string> factors;
          if (auto f = dim.getFactors())
            for (Attribute a : *f)
              factors.push_back(cast<FlatSymbolRefAttr>(a).getValue().str());
          value("Dim", dim.getSymName(),
                factors.empty() ? fn(dim.getSize()) : "nullptr", factors);
        })
        .Case<RequireOp>([&](RequireOp r) {
          os << "    m.requirements.push_back({" << fn(r.getCond()) << ", "
             << quote(r.getMessage()) << ", " << quote(where(r)) << "});\n";
        })
        .Case<DefaultDTypeOp>([&](DefaultDTypeOp d) {
          os << "    m.defaultDType = " << fn(d.getValue()) << ";\n";
        })
        .Case<ParamOp>([&](ParamOp p) {
          SmallVector<Attribute> axes;
          if (auto e = p.getExpertAttr())
            axes.push_back(ArrayAttr::get(m.getContext(), {e}));
          axes.append(p.getShape().begin(), p.getShape().end());
          os << "    {\n      ParamDecl &p = m.params.emplace_back();\n";
          os << "      p.name = " << quote(p.getSymName()) << ";\n";
          os << "      p.axes = " << axesOf(m, axes) << ";\n";
          if (auto e = p.getExpert())
            os << "      p.expert = " << quote(*e) << ";\n";
          if (auto t = p.getDtype())
            os << "      p.dtype = " << dtypeExpr(toDType(*t)) << ";\n";
          if (auto s = p.getStyleAttr()) {
            os << "      p.style = " << quote(stringifyStyleKind(s.getKind()))
               << ";\n";
            if (s.getDim()) {
              os << "      p.styleDim = " << quote(s.getDim().getValue())
                 << ";\n";
              os << "      p.styleAtoms = "
                 << stringList(atoms(m, s.getDim().getValue())) << ";\n";
            }
          }
          if (!p.getCond().empty())
            os << "      p.cond = " << fn(p.getCond()) << ";\n";
          os << "      p.where = " << quote(where(p)) << ";\n    }\n";
        })
        .Case<LinearOp>([&](LinearOp l) {
          SmallVector<Attribute> lead;
          if (auto e = l.getExpertAttr())
            lead.push_back(ArrayAttr::get(m.getContext(), {e}));
          SmallVector<Attribute> weight(lead), bias(lead);
          weight.append(l.getOut().begin(), l.getOut().end());
          weight.append(l.getIn().begin(), l.getIn().end());
          bias.append(l.getOut().begin(), l.getOut().end());
          ParallelStyleAttr s = l.getStyle();
          os << "    {\n      ParamDecl &p = m.params.emplace_back();\n";
          os << "      p.name = " << quote(l.getSymName()) << ";\n";
          os << "      p.linear = true;\n";
          os << "      p.outAxes = " << l.getOut().size() << ";\n";
          os << "      p.axes = " << axesOf(m, weight) << ";\n";
          os << "      p.biasAxes = " << axesOf(m, bias) << ";\n";
          if (auto e = l.getExpert())
            os << "      p.expert = " << quote(*e) << ";\n";
          if (auto t = l.getDtype())
            os << "      p.dtype = " << dtypeExpr(toDType(*t)) << ";\n";
          os << "      p.style = " << quote(stringifyStyleKind(s.getKind()))
             << ";\n";
          if (s.getDim()) {
            os << "      p.styleDim = " << quote(s.getDim().getValue())
               << ";\n";
            os << "      p.styleAtoms = "
               << stringList(atoms(m, s.getDim().getValue())) << ";\n";
          }
          if (l.getBias()) {
            os << "      p.bias = true;\n";
            if (!l.getBiasCond().empty())
              os << "      p.biasCond = " << fn(l.getBiasCond()) << ";\n";
          }
          if (!l.getScaleBlock().empty())
            os << "      p.scaleBlock = " << fn(l.getScaleBlock()) << ";\n";
          if (!l.getCond().empty())
            os << "      p.cond = " << fn(l.getCond()) << ";\n";
          os << "      p.where = " << quote(where(l)) << ";\n    }\n";
        })
        .Case<InstanceOp, StackOp>([&](Operation *child) {
          auto inst = dyn_cast<InstanceOp>(child);
          Region &cases = inst ? inst.getCases()
                               : cast<StackOp>(child).getCases();
          os << "    {\n      ChildDecl &c = m.children.emplace_back();\n";
          os << "      c.name = "
             << quote(cast<SymbolOpInterface>(child).getName()) << ";\n";
          if (inst) {
            if (!inst.getCond().empty())
              os << "      c.cond = " << fn(inst.getCond()) << ";\n";
          } else {
            os << "      c.stack = true;\n      c.count = "
               << fn(cast<StackOp>(child).getCount()) << ";\n";
          }
          for (auto k : cases.front().getOps<CaseOp>()) {
            os << "      {\n        CaseDecl &k = c.cases.emplace_back();\n";
            os << "        k.module = " << quote(k.getModule()) << ";\n";
            unsigned first = 0;
            if (k.getGuarded())
              os << "        k.guard = " << fn(k.getArgs(), first++) << ";\n";
            for (auto [i, name] : llvm::enumerate(k.getArgNames()))
              os << "        k.args.push_back({"
                 << quote(cast<StringAttr>(name).getValue()) << ", "
                 << fn(k.getArgs(), first + i) << "});\n";
            os << "      }\n";
          }
          os << "      c.where = " << quote(where(child)) << ";\n    }\n";
        })
        .Case<PipelineOp>([&](PipelineOp p) {
          auto names = [](ArrayAttr a) {
            std::vector<std::string> out;
            for (Attribute x : a)
              out.push_back(cast<FlatSymbolRefAttr>(x).getValue().str());
            return out;
          };
          os << "    m.first = " << stringList(names(p.getFirst())) << ";\n";
          os << "    m.last = " << stringList(names(p.getLast())) << ";\n";
          if (auto s = p.getStages())
            os << "    m.stages = " << quote(*s) << ";\n";
          if (auto f = p.getFallbacksAttr())
            for (NamedAttribute n : f)
              os << "    m.fallbacks.push_back({" << quote(n.getName())
                 << ", "
                 << quote(cast<FlatSymbolRefAttr>(n.getValue()).getValue())
                 << "});\n";
        })
        .Case<NeedsOp>([&](NeedsOp n) {
          os << "    m.needs.push_back({" << quote(n.getCapability()) << ", ";
          if (auto f = n.getFallback())
            os << "std::string(" << quote(*f) << ")";
          else
            os << "std::nullopt";
          os << ", " << quote(where(n)) << "});\n";
        });
  }
  os << "  }\n";
}

std::string Emitter::term(TermAttr t, ModuleDeclOp scope) {
  switch (t.getKind()) {
  case TermKind::dim: {
    std::vector<std::string> names = atoms(scope, t.getName().getValue());
    if (names.size() == 1)
      return "rt::atom(" + quote(names.front()) + ")";
    std::string out = "rt::product({";
    for (auto [i, a] : llvm::enumerate(names))
      out += (i ? ", " : "") + std::string("rt::atom(") + quote(a) + ")";
    return out + "})";
  }
  case TermKind::unit:
    return "rt::unit()";
  case TermKind::product: {
    std::string out = "rt::product({";
    for (auto [i, c] : llvm::enumerate(t.terms()))
      out += (i ? ", " : "") + term(c, scope);
    return out + "})";
  }
  case TermKind::parts: {
    std::string out = "rt::parts({";
    for (auto [i, p] : llvm::enumerate(t.terms())) {
      StringRef param = p.getName().getValue();
      ModuleDeclOp owner = scope;
      if (!param.empty()) {
        std::string why;
        ResolvedParam r = resolveParam(scope, param, why);
        if (r.decl)
          owner = r.owner;
      }
      out += (i ? ", " : "") + std::string("{") + quote(param) + ", {";
      for (auto [j, c] : llvm::enumerate(p.terms()))
        out += (j ? ", " : "") + term(c, param.empty() ? scope : owner);
      out += "}}";
    }
    return out + "})";
  }
  case TermKind::part:
    break;
  }
  return "rt::unit()";
}

std::string Emitter::namePieces(Operation *op, ArrayAttr segments,
                                Region &args, bool indexPiece) {
  std::string out = "{";
  for (auto [i, s] : llvm::enumerate(segments)) {
    out += i ? ", " : "";
    if (auto text = dyn_cast<StringAttr>(s)) {
      out += "{NamePiece::Text, " + quote(text.getValue()) + ", nullptr}";
    } else if (auto ref = dyn_cast<FlatSymbolRefAttr>(s)) {
      ModuleDeclOp module = getLayoutModule(op->getParentOfType<LayoutOp>());
      out += "{NamePiece::Family, " +
             quote(atoms(module, ref.getValue()).front()) + ", nullptr}";
    } else {
      int64_t n = cast<IntegerAttr>(s).getInt();
      auto yield = cast<YieldOp>(args.front().back());
      bool isIndex = indexPiece && args.front().getNumArguments() > 0 &&
                     yield.getValues()[n] == args.front().getArgument(0);
      out += std::string("{NamePiece::") + (isIndex ? "Index" : "Value") +
             ", \"\", " + fn(args, unsigned(n)) + "}";
    }
  }
  return out + "}";
}

LogicalResult Emitter::viewAxes(TensorOp t, ModuleDeclOp module,
                                std::string &out) {
  out = "{";
  auto yield = cast<YieldOp>(t.getView().front().back());
  for (auto [i, v] : llvm::enumerate(yield.getValues())) {
    int64_t factor = 1;
    std::vector<std::string> names;
    std::string spelling;
    bool ok = true;
    std::function<void(Value)> collect = [&](Value x) {
      Operation *def = x.getDefiningOp();
      if (auto c = dyn_cast_or_null<ConstantOp>(def)) {
        factor *= cast<IntegerAttr>(c.getValue()).getInt();
      } else if (auto g = dyn_cast_or_null<GetOp>(def)) {
        if (!isDimDecl(lookupValueDecl(g, g.getName()))) {
          ok = false;
          return;
        }
        for (std::string &a : atoms(module, g.getName()))
          names.push_back(std::move(a));
        spelling += (spelling.empty() ? "" : " * ") + g.getName().str();
      } else if (auto b = dyn_cast_or_null<BuiltinOp>(def);
                 b && b.getCallee() == "size") {
        collect(b.getArgs()[0]);
      } else if (auto m = dyn_cast_or_null<mdl::BinaryOp>(def);
                 m && m.getKind() == BinaryKind::mul) {
        collect(m.getLhs());
        collect(m.getRhs());
      } else {
        ok = false;
      }
    };
    collect(v);
    if (!ok)
      return t.emitError("a view size is a product of positive numbers and "
                         "dimensions, which stand for their per-rank sizes");
    bool claim = isa_and_nonnull<GetOp>(v.getDefiningOp());
    out += (i ? ", " : "") + std::string("{") + std::to_string(factor) +
           ", " + stringList(names) + ", " + (claim ? "true" : "false") +
           ", " + quote(spelling) + "}";
  }
  out += "}";
  return success();
}

void Emitter::emitLayout(LayoutOp l, raw_ostream &os) {
  ModuleDeclOp module = getLayoutModule(l);
  os << "  {\n    LayoutDecl &l = b.layouts.emplace_back();\n";
  os << "    l.module = " << quote(l.getModule()) << ";\n";
  if (auto mount = l.getMount())
    os << "    l.mount = std::string(" << quote(*mount) << ");\n";
  for (Operation &op : l.getBodyBlock()) {
    if (auto t = dyn_cast<TensorOp>(op)) {
      os << "    {\n      TensorDecl &t = l.tensors.emplace_back();\n";
      os << "      t.name = "
         << namePieces(t, t.getName(), t.getNameArgs(), false) << ";\n";
      LayoutAttr layout = t.getLayout();
      if (layout.getParam())
        os << "      t.param = " << quote(layout.getParam().getValue())
           << ";\n";
      ModuleDeclOp scope = module;
      if (layout.getParam()) {
        std::string why;
        ResolvedParam r = resolveParam(module, layout.getParam(), why);
        if (r.decl)
          scope = r.owner;
      }
      os << "      t.axes = {";
      for (auto [i, axis] : llvm::enumerate(layout.axisTerms())) {
        os << (i ? ", " : "") << "{";
        for (auto [j, c] : llvm::enumerate(axis.terms()))
          os << (j ? ", " : "") << term(c, scope);
        os << "}";
      }
      os << "};\n";
      if (auto s = t.getForStack())
        os << "      t.forStack = " << quote(*s) << ";\n";
      if (t.getCopy())
        os << "      t.copy = true;\n";
      if (!t.getCopyIf().empty())
        os << "      t.copyIf = " << fn(t.getCopyIf()) << ";\n";
      if (auto o = t.getOffset())
        os << "      t.offset = " << int64_t(*o) << ";\n";
      if (auto s = t.getStored())
        os << "      t.stored = " << dtypeExpr(toDType(*s)) << ";\n";
      if (!t.getView().empty()) {
        std::string view;
        if (mlir::failed(viewAxes(t, module, view)))
          failed = true;
        os << "      t.view = " << view << ";\n";
      }
      if (auto s = t.getSplit()) {
        os << "      t.split = " << *s << ";\n";
        if (auto by = t.getSplitBy())
          os << "      t.splitBy = " << quote(*by) << ";\n";
      }
      if (auto on = t.getOn())
        os << "      t.on = " << quote(*on) << ";\n";
      if (!t.getWhen().empty()) {
        os << "      t.when = " << fn(t.getWhen()) << ";\n";
        if (t.getReadsContext())
          os << "      t.whenReadsContext = true;\n";
      }
      os << "      t.where = " << quote(where(t)) << ";\n    }\n";
    } else if (auto m = dyn_cast<MountOp>(op)) {
      os << "    l.mounts.push_back({" << quote(m.getMember()) << ", "
         << fnOrNull(m.getWhen()) << ", "
         << namePieces(m, m.getPath(), m.getPathArgs(), true) << ", "
         << quote(where(m)) << "});\n";
    } else if (auto s = dyn_cast<ShardOp>(op)) {
      std::vector<std::string> params;
      for (Attribute a : s.getParams())
        params.push_back(cast<StringAttr>(a).str());
      os << "    l.shards.push_back({" << stringList(params) << ", "
         << quote(s.getDim()) << ", " << stringList(atoms(module, s.getDim()))
         << ", " << quote(s.getAxis()) << ", "
         << (s.getReplicate() ? "true" : "false") << "});\n";
    } else if (auto d = dyn_cast<DerivedOp>(op)) {
      std::vector<std::string> sources, recompute;
      for (Attribute a : d.getSources())
        sources.push_back(cast<StringAttr>(a).str());
      if (auto r = d.getRecompute())
        for (Attribute a : *r)
          recompute.push_back(cast<StringAttr>(a).str());
      os << "    l.derived.push_back({" << quote(d.getDerivedName()) << ", "
         << stringList(sources) << ", "
         << (d.getRecompute() ? "true" : "false") << ", "
         << stringList(recompute) << ", " << fnOrNull(d.getWhen()) << ", "
         << quote(where(d)) << "});\n";
    } else if (auto c = dyn_cast<ChoiceDefaultOp>(op)) {
      os << "    l.choiceDefaults.push_back({" << quote(c.getChoice()) << ", "
         << fn(c.getValue()) << ", " << quote(where(c)) << "});\n";
    }
  }
  os << "  }\n";
}

void Emitter::emitBackend(BackendOp b, StringRef var, raw_ostream &os) {
  os << "static BackendDecl " << var << "() {\n  BackendDecl b;\n";
  os << "  b.name = " << quote(b.getSymName()) << ";\n";
  for (Attribute a : b.getMesh())
    os << "  b.mesh.push_back(*mdl::parseMeshAxis("
       << quote(cast<StringAttr>(a).getValue()) << "));\n";
  for (Operation &op : b.getBodyBlock()) {
    if (auto l = dyn_cast<LetOp>(op)) {
      if (l.getSymName() == "vocab_multiple")
        os << "  b.vocabMultiple = " << letFn(l) << ";\n";
      else if (l.getSymName() == "rank_dir")
        os << "  b.rankDir = " << letFn(l) << ";\n";
      else if (l.getSymName() == "rank_file")
        os << "  b.rankFile = " << letFn(l) << ";\n";
      else if (l.getSymName() == "tracker_file")
        os << "  b.trackerFile = " << letFn(l) << ";\n";
      else if (l.getSymName() == "rank_saved")
        os << "  b.rankSaved = " << letFn(l) << ";\n";
      else if (l.getSymName() == "adapter_backend")
        os << "  b.adapterBackend = " << letFn(l) << ";\n";
      else if (l.getSymName() == "block_scale_suffix")
        os << "  b.blockScaleSuffix = " << letFn(l) << ";\n";
    } else if (auto r = dyn_cast<RequireOp>(op)) {
      os << "  b.requirements.push_back({" << fn(r.getCond()) << ", "
         << quote(r.getMessage()) << ", " << quote(where(r)) << "});\n";
    } else if (auto c = dyn_cast<CapabilityOp>(op)) {
      os << "  b.capabilities.push_back({" << quote(c.getCapability()) << ", "
         << fn(c.getValue()) << "});\n";
    } else if (auto c = dyn_cast<ChoiceOp>(op)) {
      std::vector<std::string> options;
      for (Attribute a : c.getOptions())
        options.push_back(cast<StringAttr>(a).str());
      os << "  b.choices.push_back({" << quote(c.getSymName()) << ", "
         << stringList(options) << "});\n";
    } else if (auto c = dyn_cast<ClassOp>(op)) {
      os << "  b.classes.push_back({" << quote(c.getRole()) << ", "
         << quote(c.getClassName()) << ", {";
      for (auto [i, p] : llvm::enumerate(c.getProps())) {
        std::string value;
        if (auto s = dyn_cast<StringAttr>(p.getValue()))
          value = s.str();
        else if (auto bl = dyn_cast<BoolAttr>(p.getValue()))
          value = bl.getValue() ? "true" : "false";
        os << (i ? ", " : "") << "{" << quote(p.getName()) << ", "
           << quote(value) << "}";
      }
      os << "}});\n";
    }
  }
  llvm::DenseSet<Operation *> modules;
  for (ModuleDeclOp m : reachableModules())
    modules.insert(m);
  for (auto l : top.getOps<LayoutOp>())
    if (l.getBackend() == b.getSymName() && modules.count(getLayoutModule(l)))
      emitLayout(l, os);
  os << "  return b;\n}\n\n";
}

/// The header of a model and backend: the entry points of the generated
/// unit, for fmt (braces of the C++ doubled).
constexpr const char *kHeaderTemplate = R"({banner}#ifndef {guard}
#define {guard}

#include "mdl/Runtime/Generated.h"

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
  std::string decls;
  llvm::raw_string_ostream os(decls);
  os << "static ModelDecl buildModel() {\n  ModelDecl d;\n";
  os << "  d.name = " << quote(modelName) << ";\n";
  os << "  d.spec = " << quote(options.specName) << ";\n";
  for (auto [field, values] :
       {std::pair{"architectures", model.getArchitectures()},
        std::pair{"modelTypes", model.getModelTypes()}})
    if (values) {
      std::vector<std::string> strings;
      for (Attribute a : *values)
        strings.push_back(cast<StringAttr>(a).str());
      os << "  d." << field << " = " << stringList(strings) << ";\n";
    }
  for (ModuleDeclOp m : reachableModules())
    emitModule(m, os);
  os << "  return d;\n}\n\n";
  emitBackend(backend, "buildBackend", os);
  BackendOp hf = dyn_cast_or_null<BackendOp>(
      SymbolTable::lookupSymbolIn(top, "hf"));
  if (hf && hf != backend)
    emitBackend(hf, "buildHfBackend", os);
  if (failed)
    return failure();

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
