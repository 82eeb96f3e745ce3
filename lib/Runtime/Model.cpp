//===- Model.cpp - Instantiating and binding generated models -------------===//
//
// The same semantics as the compiler's instantiation and binding
// (lib/Evaluate), over the declarations generated code gives: values on
// demand and memoized per instance, parameters with concrete sizes, children
// by the first case whose guard holds; then tensors named from the mounts
// above them, parts resolved to parameters, splits from styles and shard
// entries. Errors travel as EvalError inside and come out as a message that
// starts with the spec location.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Model.h"
#include "mdl/Runtime/File.h"

#include <algorithm>
#include <functional>

using namespace mdl;
using namespace mdl::rt;

namespace {
constexpr size_t kMaxParams = size_t(1) << 24;

[[noreturn]] void fail(const std::string &where, const std::string &message) {
  throw EvalError{message, where};
}

/// Rethrows an error of evaluating something declared at `where` with that
/// location, unless it has one already.
template <typename F> auto at(const std::string &where, F f) -> decltype(f()) {
  try {
    return f();
  } catch (EvalError &e) {
    if (e.where.empty())
      e.where = where;
    throw;
  }
}
} // namespace

TermDecl mdl::rt::atom(std::string name) {
  TermDecl t;
  t.atom = std::move(name);
  return t;
}

TermDecl mdl::rt::unit() {
  TermDecl t;
  t.kind = TermDecl::Unit;
  return t;
}

TermDecl mdl::rt::product(std::vector<TermDecl> children) {
  TermDecl t;
  t.kind = TermDecl::Product;
  t.children = std::move(children);
  return t;
}

TermDecl mdl::rt::parts(std::vector<TermDecl::Part> parts) {
  TermDecl t;
  t.kind = TermDecl::Parts;
  t.parts = std::move(parts);
  return t;
}

std::string EvalError::text() const {
  std::string out = where.empty() ? message : where + ": " + message;
  for (const Note &n : notes)
    out +=
        "\n" + (n.where.empty() ? "" : n.where + ": ") + "note: " + n.message;
  return out;
}

const ModuleDecl *ModelDecl::find(const std::string &module) const {
  for (const ModuleDecl &m : modules)
    if (m.name == module)
      return &m;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// HFConfig
//===----------------------------------------------------------------------===//

std::optional<HFConfig> HFConfig::load(const std::string &path,
                                       std::string &error) {
  std::string text;
  if (!readFile(path, text, error)) {
    error = "cannot read HF config " + error;
    return std::nullopt;
  }
  json::ParseError err;
  std::optional<json::Value> root = json::parse(text, err);
  if (!root) {
    error = path + ":" + std::to_string(err.line) + ":" +
            std::to_string(err.column) + ": invalid JSON: " + err.message;
    return std::nullopt;
  }
  if (root->kind() != json::Value::Object) {
    error = path + ":1:1: an HF config holds a JSON object, not " +
            json::Value::kindName(root->kind());
    return std::nullopt;
  }
  HFConfig c = fromJson(std::move(*root), path);
  c.text = std::move(text);
  return c;
}

HFConfig HFConfig::fromJson(json::Value root, std::string path) {
  HFConfig c;
  c.root = std::move(root);
  c.filePath = std::move(path);
  return c;
}

json::Value HFConfig::overrideValue(const std::string &value) {
  json::ParseError err;
  std::optional<json::Value> v = json::parse(value, err);
  return v ? *v : json::Value::string(value);
}

void HFConfig::addOverride(const std::string &key, const std::string &value) {
  overrides.push_back({key, overrideValue(value)});
}

bool HFConfig::keyMatches(std::string_view path, std::string_view key) {
  return path == key || (path.size() > key.size() &&
                         path.substr(path.size() - key.size()) == key &&
                         path[path.size() - key.size() - 1] == '.');
}

/// Whether `v` is `root` or inside it.
static bool isWithin(const json::Value &root, const json::Value &v) {
  if (&root == &v)
    return true;
  for (const json::Value &e : root.elements())
    if (isWithin(e, v))
      return true;
  for (const auto &m : root.members())
    if (isWithin(m.second, v))
      return true;
  return false;
}

std::string HFConfig::locate(const json::Value &v) const {
  if (text.empty() || !isWithin(root, v))
    return "";
  auto [line, col] = json::lineColumn(text, v.offset);
  return filePath + ":" + std::to_string(line) + ":" + std::to_string(col);
}

const json::Value *HFConfig::lookup(std::string_view path) const {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
    if (keyMatches(path, it->first))
      return &it->second;
  const json::Value *v = &root;
  size_t start = 0;
  while (v && start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(
        start, dot == std::string_view::npos ? std::string_view::npos
                                             : dot - start);
    v = v->get(part);
    if (dot == std::string_view::npos)
      break;
    start = dot + 1;
  }
  return v;
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

const Value &Eval::present(const Value &v) {
  if (v.kind == Value::Missing)
    throw EvalError{missingMessage(scope.model->config().path(), v)};
  return v;
}

Value Eval::hf(const char *path, const char *type) {
  const json::Value *j = scope.model->config().lookup(path);
  if (!j || j->isNull())
    return Value::missing({path});
  Value out;
  std::string error;
  if (!valueFromJson(*j, type, out, error)) {
    // A list element's error starts with its index path: "[1][0] is ...";
    // the note points at that element.
    std::string where = path;
    const json::Value *bad = j;
    while (!error.empty() && error[0] == '[') {
      size_t close = error.find(']');
      where += error.substr(0, close + 1);
      bad = &bad->elements()[std::stoul(error.substr(1, close - 1))];
      error = error.substr(close + 1);
    }
    if (!error.empty() && error[0] == ' ')
      error.erase(0, 1);
    const HFConfig &config = scope.model->config();
    std::string at = config.locate(*bad);
    EvalError e{"'" + where + "' " +
                (at.empty() ? std::string("(from --set)")
                            : "in '" + config.path() + "'") +
                " " + error};
    if (!at.empty())
      e.notes.push_back({at, "the value is here"});
    throw e;
  }
  return out;
}

Value Eval::context(const char *var) {
  if (!ctx)
    throw EvalError{std::string("'") + var +
                    "' depends on the parallel configuration, which is not "
                    "known here"};
  ContextVar v = *parseContextVar(var);
  int64_t x = contextValue(*ctx, v);
  return isBoolContextVar(v) ? Value::boolean(x) : Value::integer(x);
}

Value Eval::choice(const char *name, const char *first) {
  if (choices)
    if (auto it = choices->find(name); it != choices->end())
      return Value::string(it->second);
  return Value::string(first);
}

bool Eval::is(const char *instance, const char *module) {
  auto it = scope.instances.find(instance);
  return it != scope.instances.end() && it->second->module->name == module;
}

const Value &Eval::arg(size_t i) {
  if (i >= args.size())
    throw EvalError{"internal error: unbound block argument"};
  return args[i];
}

Value mdl::rt::bin(Eval &e, BinaryOp op, const Value &l, const Value &r) {
  Value out;
  std::string error;
  if (!applyBinary(op, e.present(l), e.present(r), out, error))
    throw EvalError{error};
  return out;
}

bool mdl::rt::truthy(Eval &e, const Value &v) { return e.present(v).i != 0; }

Value mdl::rt::neg(Eval &e, const Value &v) {
  Value out;
  std::string error;
  if (!applyNeg(e.present(v), out, error))
    throw EvalError{error};
  return out;
}

Value mdl::rt::index(Eval &e, const Value &list, const Value &i) {
  Value out;
  std::string error;
  if (!applyIndex(e.present(list), e.present(i), out, error))
    throw EvalError{error};
  return out;
}

Value mdl::rt::contains(Eval &e, const Value &list, const Value &v) {
  return Value::boolean(applyContains(e.present(list), e.present(v)));
}

Value mdl::rt::builtin(Eval &e, const char *name, std::vector<Value> args) {
  for (Value &a : args)
    a = e.present(std::move(a));
  Value out;
  std::string error;
  if (!applyBuiltin(name, args, out, error))
    throw EvalError{error};
  return out;
}

/// Evaluates `expr` in `scope`; `dflt` when there is none. A missing value
/// is an error here.
static Value
evalOne(Instance &scope, const Expr &expr, const Value &dflt,
        const RankContext *ctx = nullptr,
        const std::map<std::string, std::string> *choices = nullptr,
        std::vector<Value> args = {}) {
  if (!expr)
    return dflt;
  Eval e(scope, ctx, choices, std::move(args));
  return e.present(expr(e));
}

//===----------------------------------------------------------------------===//
// Instance
//===----------------------------------------------------------------------===//

std::string Instance::describe() const {
  return (path.empty() ? "the model" : path) + " (" + module->name + ")";
}

const Value &Instance::get(const std::string &name) {
  if (auto it = cache.find(name); it != cache.end())
    return it->second;
  const ValueDecl *decl = nullptr;
  for (const ValueDecl &v : module->values)
    if (v.name == name)
      decl = &v;
  if (!decl)
    throw EvalError{"'" + name + "' is not defined in '" + module->name + "'"};
  if (failed.count(name))
    throw EvalError{"", "", {}, /*reported=*/true};
  if (inProgress[name])
    throw EvalError{"'" + name + "' depends on itself"};
  if (model->evalDepth >= kMaxEvalDepth)
    throw EvalError{"'" + name + "' needs names (or instances) nested more " +
                    "than " + std::to_string(kMaxEvalDepth) + " deep"};
  inProgress[name] = true;
  ++model->evalDepth;
  struct Done {
    std::map<std::string, bool> &m;
    const std::string &n;
    int &depth;
    ~Done() {
      m[n] = false;
      --depth;
    }
  } done{inProgress, name, model->evalDepth};

  // A failure is reported once, where the name is declared; what reads
  // the name fails too, without a report of its own.
  auto report = [&](EvalError &e) {
    failed.insert(name);
    if (!e.reported)
      model->errors.push_back(e);
    e = EvalError{"", "", {}, /*reported=*/true};
  };
  Value result;
  try {
    result = at(decl->where, [&]() -> Value {
      if (decl->kind == ValueDecl::Input) {
        if (auto it = inputs.find(name); it != inputs.end())
          return it->second;
        return evalOne(*this, decl->expr, Value());
      }
      if (!decl->factors.empty()) {
        int64_t size = 1;
        for (const std::string &f : decl->factors)
          if (__builtin_mul_overflow(size, get(f).i, &size))
            throw EvalError{"the size of dimension '" + name +
                            "' does not fit in 64 bits"};
        return Value::integer(size);
      }
      return evalOne(*this, decl->expr, Value());
    });
    if (decl->kind == ValueDecl::Dim && result.i <= 0)
      fail(decl->where, "dimension '" + name + "' of " + describe() +
                            " has size " + std::to_string(result.i) +
                            "; sizes must be positive");
  } catch (EvalError &e) {
    report(e);
    throw;
  }
  return cache[name] = std::move(result);
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

std::unique_ptr<Model> Model::create(const ModelDecl &decl, HFConfig config,
                                     std::string &error) {
  std::vector<EvalError> errors;
  std::unique_ptr<Model> m = create(decl, std::move(config), errors);
  if (!m)
    error = errors.front().text();
  return m;
}

/// Runs `f`; an error it throws is added to `errors` (unless counted
/// already). Whether it succeeded.
template <typename F> static bool collect(std::vector<EvalError> &errors, F f) {
  try {
    f();
    return true;
  } catch (EvalError &e) {
    if (!e.reported)
      errors.push_back(std::move(e));
    return false;
  }
}

std::unique_ptr<Model> Model::create(const ModelDecl &decl, HFConfig config,
                                     std::vector<EvalError> &errors,
                                     bool raiseSingleStacks) {
  std::unique_ptr<Model> m(new Model(decl, std::move(config)));
  m->raiseSingles = raiseSingleStacks;
  const ModuleDecl &top = decl.modules.front();
  m->rootInstance = std::make_unique<Instance>();
  Instance &root = *m->rootInstance;
  root.module = &top;
  root.model = m.get();
  for (const std::string &f : top.first)
    m->placement[f] = {Placement::First};
  for (const std::string &l : top.last)
    m->placement[l] = {Placement::Last};
  m->stagedStack = top.stages;
  if (top.defaultDType)
    collect(m->errors, [&] {
      m->defaultDType =
          at(top.where, [&] { return evalOne(root, top.defaultDType, {}); })
              .dtype;
    });
  collect(m->errors, [&] { m->build(root); });
  if (m->errors.empty())
    return m;
  errors = std::move(m->errors);
  return nullptr;
}

void Model::build(Instance &node) {
  if (evalDepth >= kMaxEvalDepth)
    throw EvalError{
        "module '" + node.module->name + "' is instantiated more than " +
            std::to_string(kMaxEvalDepth) + " deep in names and instances",
        node.module->where};
  ++evalDepth;
  struct Leave {
    int &depth;
    ~Leave() { --depth; }
  } leave{evalDepth};
  // Every value first, so that each bad one is reported once, where
  // declared; then every requirement.
  bool ok = true;
  for (const ValueDecl &v : node.module->values)
    ok &= collect(errors, [&] { node.get(v.name); });
  if (!ok)
    throw EvalError{"", "", {}, /*reported=*/true};
  for (const RequireDecl &r : node.module->requirements)
    ok &= collect(errors, [&] {
      if (at(r.where, [&] { return evalOne(node, r.cond, {}); }).i)
        return;
      EvalError e{"requirement failed: " + r.message, r.where};
      if (node.parent)
        e.notes.push_back({node.module->where, "in " + node.describe()});
      throw e;
    });
  if (!ok)
    throw EvalError{"", "", {}, /*reported=*/true};
  buildParams(node);
  buildChildren(node);
}

void Model::buildParams(Instance &node) {
  auto prefix = [&](const std::string &name) {
    return node.path.empty() ? name : node.path + "." + name;
  };
  auto stageOf = [&](const std::string &member) {
    if (node.parent)
      return node.stage;
    auto it = placement.find(member);
    return it == placement.end() ? Placement() : it->second;
  };
  auto add = [&](const ParamDecl &d, ParamInstance p,
                 const std::vector<std::vector<std::string>> &axes) {
    int64_t n = 1;
    for (const auto &axis : axes) {
      for (const std::string &atom : axis) {
        int64_t size = node.get(atom).i;
        p.sizes.push_back(size);
        if (__builtin_mul_overflow(n, size, &n))
          fail(d.where, "parameter '" + p.path +
                            "' has more elements than fit in 64 bits");
      }
      p.axes.push_back(axis);
    }
    if (__builtin_add_overflow(elementCount, n, &elementCount) ||
        elementCount > kMaxModelElements)
      fail(d.where, "the model has more than " +
                        std::to_string(kMaxModelElements) +
                        " elements (at parameter '" + p.path +
                        "'): the config's sizes are out of bounds");
    if (d.dtype)
      p.dtype = *d.dtype;
    else if (defaultDType)
      p.dtype = *defaultDType;
    else
      fail(d.where, "parameter '" + p.path +
                        "' has no dtype: give it one, or give the model a "
                        "default with `dtype = bf16;`");
    if (++paramCount > kMaxParams)
      fail(d.where, "the model has more than " + std::to_string(kMaxParams) +
                        " parameters");
    node.params.push_back(std::move(p));
  };
  for (const ParamDecl &d : node.module->params) {
    if (!at(d.where,
            [&] { return evalOne(node, d.cond, Value::boolean(true)); })
             .i)
      continue;
    ParamInstance p;
    p.path = prefix(d.name);
    p.decl = &d;
    p.style = d.style;
    p.styleAtoms = d.styleAtoms;
    p.styleDim = d.styleDim;
    p.expert = d.expert;
    p.stage = stageOf(d.name);
    if (d.scaleBlock) {
      p.scaleBlock = at(d.where, [&] { return evalOne(node, d.scaleBlock,
                                                      Value::integer(0)); })
                         .i;
      if (p.scaleBlock < 0)
        fail(d.where, "the scale block size of '" + p.path +
                          "' is negative (" + std::to_string(p.scaleBlock) +
                          ")");
    }
    ParamInstance b = p;
    b.scaleBlock = 0;
    add(d, std::move(p), d.axes);
    // An FP8 block-scaled weight is stored in E4M3 unless declared otherwise.
    if (node.params.back().scaleBlock > 0 && !d.dtype)
      node.params.back().dtype = DType::F8E4M3;
    if (!d.linear || !d.bias ||
        !at(d.where,
            [&] { return evalOne(node, d.biasCond, Value::boolean(true)); })
             .i)
      continue;
    b.path += ".bias";
    b.bias = true;
    // A row-parallel bias is added after the reduction: it is not split.
    if (b.style == TensorParallelStyle::Row)
      b.style = TensorParallelStyle::Replicated;
    add(d, std::move(b), d.biasAxes);
  }
}

std::unique_ptr<Instance> Model::makeChild(Instance &parent,
                                           const ChildDecl &c,
                                           const std::string &path,
                                           const Value *index) {
  std::vector<Value> args;
  if (index)
    args.push_back(*index);
  for (const CaseDecl &k : c.cases) {
    if (k.guard && !at(c.where, [&] {
          return evalOne(parent, k.guard, {}, nullptr, nullptr, args);
        }).i)
      continue;
    const ModuleDecl *callee = modelDecl->find(k.module);
    if (!callee)
      fail(c.where, "internal error: unknown module '" + k.module + "'");
    auto child = std::make_unique<Instance>();
    child->module = callee;
    child->parent = &parent;
    child->model = this;
    child->path = path;
    for (const auto &[name, expr] : k.args)
      child->inputs[name] = at(c.where, [&] {
        return evalOne(parent, expr, {}, nullptr, nullptr, args);
      });
    return child;
  }
  EvalError e{"no case of '" + c.name + "' applies" +
                  (index ? " at index " + std::to_string(index->i) : ""),
              c.where};
  if (parent.parent)
    e.notes.push_back({parent.module->where, "in " + parent.describe()});
  throw e;
}

void Model::buildChildren(Instance &node) {
  auto childPath = [&](const std::string &name) {
    return node.path.empty() ? name : node.path + "." + name;
  };
  for (const ChildDecl &c : node.module->children) {
    if (!c.stack) {
      if (!at(c.where,
              [&] { return evalOne(node, c.cond, Value::boolean(true)); })
               .i)
        continue;
      std::unique_ptr<Instance> child =
          makeChild(node, c, childPath(c.name), nullptr);
      auto it = placement.find(c.name);
      child->stage =
          node.parent || it == placement.end() ? node.stage : it->second;
      build(*child);
      node.childOrder.push_back(c.name);
      node.instances[c.name] = std::move(child);
      continue;
    }
    int64_t count =
        at(c.where, [&] { return evalOne(node, c.count, {}); }).i;
    if (count < 0 || count > kMaxStackLength)
      fail(c.where, "stack '" + c.name + "' has length " +
                        std::to_string(count) + "; it must be between 0 and " +
                        std::to_string(kMaxStackLength));
    auto &elements = node.stacks[c.name];
    node.childOrder.push_back(c.name);
    bool staged = !node.parent && c.name == stagedStack;
    auto it = placement.find(c.name);
    if (raiseSingles && count == 1 && !staged) {
      count = 2;
      raised.push_back(childPath(c.name));
    }
    for (int64_t i = 0; i < count; ++i) {
      Value index = Value::integer(i);
      std::unique_ptr<Instance> child = makeChild(
          node, c, childPath(c.name) + "." + std::to_string(i), &index);
      child->stackName = c.name;
      child->stackIndex = i;
      child->stage = staged ? Placement{Placement::Layer, i}
                     : !node.parent && it != placement.end() ? it->second
                                                             : node.stage;
      build(*child);
      elements.push_back(std::move(child));
    }
  }
}

void Model::walk(const std::function<void(Instance &)> &fn) {
  std::function<void(Instance &)> visit = [&](Instance &n) {
    fn(n);
    for (const std::string &name : n.childOrder) {
      if (auto it = n.instances.find(name); it != n.instances.end())
        visit(*it->second);
      if (auto it = n.stacks.find(name); it != n.stacks.end())
        for (auto &c : it->second)
          visit(*c);
    }
  };
  visit(*rootInstance);
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

namespace {

std::vector<NameSegment> join(const std::vector<NameSegment> &prefix,
                              const std::vector<NameSegment> &name) {
  std::vector<NameSegment> out = prefix;
  bool nameEmpty = name.empty() || (name.size() == 1 &&
                                    name[0].kind == NameSegment::Text &&
                                    name[0].text.empty());
  if (!prefix.empty() && !nameEmpty) {
    NameSegment dot;
    dot.text = ".";
    out.push_back(dot);
  }
  if (!nameEmpty)
    out.insert(out.end(), name.begin(), name.end());
  return out;
}

class Binder {
public:
  Binder(Model &model, const BackendDecl &backend,
         std::shared_ptr<std::map<std::string, std::string>> choices,
         BoundLayout &out)
      : model(model), backend(backend), choices(std::move(choices)),
        out(out) {
    for (const LayoutDecl &l : backend.layouts)
      layouts[l.module] = &l;
  }

  void run() {
    const ModuleDecl &top = model.decl().modules.front();
    out.layout.model = model.decl().name;
    out.layout.backend = backend.name;
    out.layout.mesh = backend.mesh;
    out.layout.hasPipeline = !top.stages.empty() || !top.first.empty() ||
                             !top.last.empty();
    bindParams();
    bindBackend();
    bindNode(model.root(), {});
    for (auto &[name, value] : *choices)
      out.layout.choices[name] = value;
    out.layout.classes = backend.classes;
    bindBlockScales();
  }

private:
  /// The source id of a declaration: one per place in the spec.
  int source(const std::string &where) {
    auto [it, fresh] = sourceIds.try_emplace(where, int(out.sources.size()));
    if (fresh)
      out.sources.push_back(where);
    return it->second;
  }
  const LayoutDecl *layoutFor(const Instance &node) const {
    auto it = layouts.find(node.module->name);
    return it == layouts.end() ? nullptr : it->second;
  }
  int findParam(Instance &node, const std::string &dotted) {
    std::string path = node.path.empty() ? dotted : node.path + "." + dotted;
    auto it = paramIndex.find(path);
    return it == paramIndex.end() ? -1 : it->second;
  }
  int unitOf(Instance *node) {
    while (node && node->stackIndex < 0)
      node = node->parent;
    if (!node)
      return -1;
    auto [it, inserted] = units.try_emplace(node, int(units.size()));
    if (inserted)
      out.layout.unitIndex.push_back(node->stackIndex);
    return it->second;
  }

  /// The splits of a parameter over the mesh, and (`style`) how tensor
  /// parallelism splits it on this backend.
  std::vector<Split> splitsOf(const ParamInstance &p,
                              TensorParallelStyle &style) {
    using Style = TensorParallelStyle;
    style = Style::Replicated;
    std::vector<Split> splits;
    bool grouped = !p.expert.empty();
    if (grouped) {
      Split e;
      e.atoms = {p.expert};
      e.axis = MeshAxis::EP;
      e.why = "expert dimension " + p.expert + " of " + p.path;
      splits.push_back(e);
    }
    auto find = [&](const std::string &path) -> const ShardDecl * {
      auto it = overrides.find(path);
      return it == overrides.end() ? nullptr : it->second;
    };
    const ShardDecl *s = find(p.path);
    if (!s && p.bias)
      s = find(p.path.substr(0, p.path.size() - 5));
    auto has = [&](const std::string &atom) {
      for (const auto &axis : p.axes)
        if (std::find(axis.begin(), axis.end(), atom) != axis.end())
          return true;
      return false;
    };
    if (s && std::all_of(s->atoms.begin(), s->atoms.end(), has)) {
      Split t;
      t.atoms = s->atoms;
      t.axis = s->axis;
      t.replicateWhenFewer = s->replicate;
      t.why = "shard " + s->dim + " of " + p.path;
      splits.push_back(t);
      if (t.axis == MeshAxis::TP || t.axis == MeshAxis::ETP)
        style = shardStyle(p, t.atoms.front());
      return splits;
    }
    if (p.style == Style::None || p.style == Style::Replicated)
      return splits;
    Split t;
    t.atoms = p.styleAtoms;
    t.axis = grouped ? MeshAxis::ETP : MeshAxis::TP;
    t.why = std::string(tensorParallelStyleName(p.style)) + "(" + p.styleDim +
            ") of " + p.path;
    style = p.style;
    // A vocabulary split is vocab-parallel where the backend pads the
    // vocabulary; elsewhere it is a linear's plain output split.
    if (style == Style::Vocab && !backend.vocabMultiple)
      style = Style::Column;
    if (style == Style::Vocab) {
      Instance *root = &model.root();
      Expr pad = backend.vocabMultiple;
      auto ch = choices;
      t.padMultiple = [root, pad, ch](const ParallelConfig &c) -> int64_t {
        RankContext ctx;
        ctx.config = c;
        try {
          int64_t v = evalOne(*root, pad, Value::integer(1), &ctx, ch.get()).i;
          return v > 0 ? v : 1;
        } catch (EvalError &) {
          return 1;
        }
      };
    }
    splits.push_back(t);
    return splits;
  }

  /// The style a layout's `shard ... by tp` of dimension atom `atom` gives:
  /// a linear split on an output dimension is column-parallel, on an input
  /// one row-parallel; another parameter is sharded.
  static TensorParallelStyle shardStyle(const ParamInstance &p,
                                        const std::string &atom) {
    if (!p.decl->linear)
      return TensorParallelStyle::Shard;
    size_t lead = p.expert.empty() ? 0 : 1;
    for (size_t a = lead; a < p.axes.size(); ++a)
      if (std::find(p.axes[a].begin(), p.axes[a].end(), atom) !=
          p.axes[a].end())
        return p.bias || a < lead + size_t(p.decl->outAxes)
                   ? TensorParallelStyle::Column
                   : TensorParallelStyle::Row;
    return TensorParallelStyle::Shard;
  }

  void bindParams() {
    model.walk([&](Instance &node) {
      if (const LayoutDecl *l = layoutFor(node))
        for (const ShardDecl &s : l->shards)
          for (const std::string &p : s.params)
            overrides[node.path.empty() ? p : node.path + "." + p] = &s;
    });
    model.walk([&](Instance &node) {
      for (const ParamInstance &p : node.params) {
        Param rp;
        rp.path = p.path;
        rp.dtype = p.dtype;
        for (const auto &axis : p.axes) {
          rp.axisAtoms.push_back(int(axis.size()));
          rp.atoms.insert(rp.atoms.end(), axis.begin(), axis.end());
        }
        rp.sizes = p.sizes;
        rp.placement = p.stage;
        if (p.decl->linear)
          rp.linearOutAxes = p.decl->outAxes;
        rp.bias = p.bias;
        rp.scaleBlock = p.scaleBlock;
        rp.expert = p.expert;
        rp.unit = unitOf(&node);
        rp.source = source(p.decl->where);
        rp.splits = splitsOf(p, rp.style);
        paramIndex[p.path] = int(out.layout.params.size());
        out.layout.params.push_back(std::move(rp));
        out.params.push_back(&p);
      }
    });
  }

  void bindBlockScales() {
    if (backend.blockScaleSuffix) {
      RankContext one;
      out.layout.blockScaleSuffix =
          evalOne(model.root(), backend.blockScaleSuffix, Value::string(""),
                  &one, choices.get())
              .s;
    }
    size_t numParams = out.layout.params.size();
    BlockScaleResult r = addBlockScales(
        out.layout, model.dtype().value_or(DType::BF16));
    // One error per layout entry, with its first tensor and how many more:
    // a transposed entry of a layer would otherwise be reported once per
    // layer.
    std::map<std::string, std::pair<size_t, int>> grouped; // first, more
    std::vector<std::string> order;
    for (size_t e = 0; e < r.errors.size(); ++e) {
      const std::string &entry = out.sources[size_t(
          out.layout.tensors[size_t(r.errors[e].first)].source)];
      auto [it, fresh] = grouped.try_emplace(entry, e, 0);
      if (fresh)
        order.push_back(entry);
      else
        ++it->second.second;
    }
    for (const std::string &entry : order) {
      auto [first, more] = grouped[entry];
      const TensorSpec &t = out.layout.tensors[size_t(r.errors[first].first)];
      std::string message =
          "tensor '" + renderName(t, 0) + "' " + r.errors[first].second;
      if (more)
        message += " (and " + std::to_string(more) + " more tensor" +
                   (more > 1 ? "s" : "") + " of this entry)";
      errors.push_back({message + " [block-scale]", entry});
    }
    if (!errors.empty())
      throw EvalError{"", "", {}, /*reported=*/true};
    for (size_t i = numParams; i < out.layout.params.size(); ++i)
      out.params.push_back(
          out.params[size_t(out.layout.params[i].scaleOf)]);
    for (int c : r.companionOf)
      out.tensorNodes.push_back(out.tensorNodes[size_t(c)]);
  }

  void bindBackend() {
    Instance *root = &model.root();
    auto ch = choices;
    for (const RequireDecl &r : backend.requirements) {
      Expr cond = r.cond;
      std::string message = r.message;
      out.layout.requirements.push_back(
          [root, cond, message, ch](
              const ParallelConfig &c) -> std::optional<std::string> {
            RankContext ctx;
            ctx.config = c;
            try {
              if (evalOne(*root, cond, Value::boolean(true), &ctx, ch.get()).i)
                return std::nullopt;
            } catch (EvalError &) {
            }
            return message;
          });
    }
    RankContext one;
    for (const auto &[cap, expr] : backend.capabilities)
      out.layout.capabilities[cap] =
          evalOne(*root, expr, Value::boolean(false), &one, ch.get()).i;
    model.walk([&](Instance &node) {
      for (const NeedDecl &n : node.module->needs) {
        ModelLayout::CapabilityNeed need;
        need.instance = node.describe();
        need.capability = n.capability;
        need.fallback = n.fallback;
        need.source = source(n.where);
        out.layout.needs.push_back(need);
      }
    });
    const ModuleDecl &top = model.decl().modules.front();
    for (const auto &[wanted, fallback] : top.fallbacks) {
      out.layout.lastStageNeeds.push_back(
          {findParam(*root, wanted), findParam(*root, fallback)});
      out.layout.lastStageNeedsWhy = wanted + " to compute logits, or a copy of " +
                                     fallback + " when there is no " + wanted;
    }
  }

  std::vector<NameSegment> render(Instance &node,
                                  const std::vector<NamePiece> &pieces,
                                  const Value *index, bool staged,
                                  const std::string &where) {
    std::vector<NameSegment> out;
    std::vector<Value> args;
    if (index)
      args.push_back(*index);
    for (const NamePiece &p : pieces) {
      NameSegment seg;
      switch (p.kind) {
      case NamePiece::Text:
        seg.text = p.text;
        break;
      case NamePiece::Family:
        seg.kind = NameSegment::Family;
        seg.atom = p.text;
        break;
      case NamePiece::Index:
        if (staged && index) {
          seg.kind = NameSegment::LayerIndex;
          seg.layer = index->i;
          break;
        }
        [[fallthrough]];
      case NamePiece::Value: {
        Value v = at(where, [&] {
          return evalOne(node, p.value, {}, nullptr, choices.get(), args);
        });
        seg.text = v.kind == Value::String ? v.s : std::to_string(v.i);
        break;
      }
      }
      out.push_back(std::move(seg));
    }
    if (staged && index &&
        std::none_of(out.begin(), out.end(), [](const NameSegment &s) {
          return s.kind == NameSegment::LayerIndex;
        }))
      fail(where, "the mount of a pipelined stack must name its index as a "
                  "plain placeholder, as in \"layers.{i}\", so that each "
                  "stage can renumber it");
    return out;
  }

  /// A term with its part set resolved to parameter indices; `dropped`
  /// when every part of a set is absent.
  Term term(const TermDecl &t, Instance &node, bool &dropped) {
    Term out;
    switch (t.kind) {
    case TermDecl::Atom:
      return Term::makeAtom(t.atom);
    case TermDecl::Unit:
      out.kind = Term::Unit;
      return out;
    case TermDecl::Product:
      out.kind = Term::Product;
      for (const TermDecl &c : t.children)
        out.children.push_back(term(c, node, dropped));
      return out;
    case TermDecl::Parts:
      out.kind = Term::Parts;
      for (const TermDecl::Part &p : t.parts) {
        Term::Part part;
        if (p.param.empty()) {
          bool groupDropped = false;
          for (const TermDecl &c : p.shape)
            part.shape.push_back(term(c, node, groupDropped));
          if (!groupDropped)
            out.parts.push_back(std::move(part));
          continue;
        }
        part.param = findParam(node, p.param);
        if (part.param < 0)
          continue; // a part left out by a condition drops out of the set
        for (const TermDecl &c : p.shape)
          part.shape.push_back(term(c, node, dropped));
        out.parts.push_back(std::move(part));
      }
      if (out.parts.empty())
        dropped = true;
      return out;
    }
    return out;
  }

  void bindTensor(Instance &node, const TensorDecl &d,
                  const std::vector<NameSegment> &prefix, Instance *element) {
    TensorSpec t;
    t.source = source(d.where);
    t.mounts = mountChain;
    t.unit = unitOf(element ? element : &node);
    std::vector<Value> args;
    if (element)
      args.push_back(Value::integer(element->stackIndex));
    if (d.when) {
      if (d.whenReadsContext) {
        Instance *n = &node;
        Expr when = d.when;
        auto ch = choices;
        t.when = [n, when, args, ch](const RankContext &ctx) {
          try {
            return evalOne(*n, when, {}, &ctx, ch.get(), args).i != 0;
          } catch (EvalError &) {
            return false;
          }
        };
      } else if (!at(d.where, [&] {
                   return evalOne(node, d.when, {}, nullptr, choices.get(),
                                  args);
                 }).i) {
        return;
      }
    }
    t.name = join(prefix, render(node, d.name, element ? &args.front() : nullptr,
                                 false, d.where));
    if (!d.param.empty()) {
      t.param = findParam(node, d.param);
      if (t.param < 0)
        return; // the parameter does not exist here
    }
    bool dropped = false;
    for (const auto &axis : d.axes) {
      std::vector<Term> terms;
      for (const TermDecl &c : axis)
        terms.push_back(term(c, node, dropped));
      t.axes.push_back(std::move(terms));
    }
    if (dropped)
      return;
    t.copy = d.copy;
    if (d.copyIf)
      t.copy = at(d.where, [&] {
                 return evalOne(node, d.copyIf, {}, nullptr, choices.get(),
                                args);
               }).i != 0;
    t.offset = d.offset;
    t.stored = d.stored;
    t.view = d.view;
    if (d.split) {
      t.splitAxis = *d.split;
      t.splitBy = d.splitBy;
    }
    if (d.on)
      t.on = Placement{*d.on};
    else if (element)
      t.on = element->stage;
    out.layout.tensors.push_back(std::move(t));
    out.tensorNodes.push_back(element ? element : &node);
  }

  /// `name` under the mount `prefix` (layer numbers as the layout's).
  static std::string prefixed(const std::vector<NameSegment> &prefix,
                              const std::string &name) {
    std::string p;
    for (const NameSegment &seg : prefix)
      p += seg.kind == NameSegment::Text ? seg.text : std::to_string(seg.layer);
    return p.empty() ? name : p + "." + name;
  }

  void bindNode(Instance &node, const std::vector<NameSegment> &prefix) {
    const LayoutDecl *layout = layoutFor(node);
    if (!layout && !node.params.empty())
      throw EvalError{
          "module '" + node.module->name +
              "' has parameters but no layout for backend '" + backend.name +
              "'",
          node.module->where,
          {{node.module->where, "first used by " + node.describe()}}};
    if (layout) {
      for (const BufferDecl &b : layout->buffers)
        if (at(b.where, [&] {
              return evalOne(node, b.when, Value::boolean(true), nullptr,
                             choices.get());
            }).i)
          out.layout.buffers.insert(prefixed(prefix, b.name));
      for (const DerivedDecl &d : layout->derived) {
        if (!at(d.where, [&] {
              return evalOne(node, d.when, Value::boolean(true), nullptr,
                             choices.get());
            }).i)
          continue;
        ModelLayout::DerivedTensor dt;
        dt.name = prefixed(prefix, d.name);
        for (const std::string &s : d.sources) {
          int index = findParam(node, s);
          if (index >= 0)
            dt.params.push_back(index);
        }
        dt.hasRecompute = d.hasRecompute;
        dt.recompute = d.recompute;
        dt.source = source(d.where);
        out.layout.derived.push_back(std::move(dt));
      }
      for (const TensorDecl &t : layout->tensors) {
        if (!t.forStack.empty()) {
          auto it = node.stacks.find(t.forStack);
          if (it != node.stacks.end())
            for (auto &element : it->second)
              bindTensor(node, t, prefix, element.get());
          continue;
        }
        bindTensor(node, t, prefix, nullptr);
      }
    }
    // A child's name, and in `from` the entry that decides it: a mount of
    // this layout, the child layout's own mount, else the member.
    auto mountOf = [&](const ChildDecl &c, Instance &child, const Value *index,
                       bool staged,
                       std::string &from) -> std::vector<NameSegment> {
      const std::string &member = c.name;
      from = c.where;
      if (layout)
        for (const MountDecl &m : layout->mounts) {
          if (m.member != member)
            continue;
          std::vector<Value> args;
          if (index)
            args.push_back(*index);
          if (!at(m.where, [&] {
                return evalOne(node, m.when, Value::boolean(true), nullptr,
                               choices.get(), args);
              }).i)
            continue;
          from = m.where;
          return render(node, m.path, index, staged, m.where);
        }
      std::vector<NameSegment> name;
      NameSegment seg;
      if (index) {
        seg.text = member + ".";
        name.push_back(seg);
        NameSegment idx;
        if (staged) {
          idx.kind = NameSegment::LayerIndex;
          idx.layer = index->i;
        } else {
          idx.text = std::to_string(index->i);
        }
        name.push_back(idx);
        return name;
      }
      const LayoutDecl *childLayout = layoutFor(child);
      if (childLayout && childLayout->mount)
        from = childLayout->where;
      seg.text = childLayout && childLayout->mount ? *childLayout->mount
                                                   : member;
      name.push_back(seg);
      return name;
    };
    // Each child under the mounts that place it, so that a name two of
    // them share can be blamed on the mount.
    auto bindChild = [&](Instance &child, std::vector<NameSegment> name,
                         const std::string &from) {
      mountChain.push_back({source(from), mountedNodes++});
      bindNode(child, join(prefix, name));
      mountChain.pop_back();
    };
    for (const ChildDecl &c : node.module->children) {
      std::string from;
      if (auto it = node.instances.find(c.name); it != node.instances.end()) {
        std::vector<NameSegment> name =
            mountOf(c, *it->second, nullptr, false, from);
        bindChild(*it->second, std::move(name), from);
        continue;
      }
      auto it = node.stacks.find(c.name);
      if (it == node.stacks.end())
        continue;
      bool staged = !node.parent && !it->second.empty() &&
                    it->second.front()->stage.kind == Placement::Layer;
      for (auto &child : it->second) {
        Value index = Value::integer(child->stackIndex);
        std::vector<NameSegment> name =
            mountOf(c, *child, &index, staged, from);
        bindChild(*child, std::move(name), from);
      }
      if (staged)
        out.layout.stagedLayers = int64_t(it->second.size());
    }
  }

public:
  /// Errors reported together (the block scales of several entries).
  std::vector<EvalError> errors;

private:
  /// The mounts that place the node being bound, outermost first, and a
  /// number for each node they place.
  std::vector<std::pair<int, int>> mountChain;
  int mountedNodes = 0;
  std::map<std::string, int> sourceIds;

private:
  Model &model;
  const BackendDecl &backend;
  std::shared_ptr<std::map<std::string, std::string>> choices;
  BoundLayout &out;
  std::map<std::string, const LayoutDecl *> layouts;
  std::map<std::string, int> paramIndex;
  std::map<std::string, const ShardDecl *> overrides;
  std::map<Instance *, int> units;
};

} // namespace

std::map<std::string, std::string>
mdl::rt::defaultChoices(Model &model, const BackendDecl &backend) {
  std::map<std::string, std::string> out;
  for (const ChoiceDecl &c : backend.choices)
    out[c.name] = c.options.front();
  for (const LayoutDecl &l : backend.layouts) {
    if (l.module != model.root().module->name)
      continue;
    for (const LayoutDecl::ChoiceDefault &d : l.choiceDefaults) {
      auto it = std::find_if(backend.choices.begin(), backend.choices.end(),
                             [&](const auto &c) { return c.name == d.choice; });
      if (it == backend.choices.end())
        continue;
      std::string value =
          at(d.where, [&] { return evalOne(model.root(), d.value, {}).s; });
      if (std::find(it->options.begin(), it->options.end(), value) ==
          it->options.end()) {
        std::string options;
        for (const std::string &o : it->options)
          options += (options.empty() ? "" : ", ") + o;
        fail(d.where, "the default of choice '" + d.choice + "' is '" + value +
                          "', which is not one of its options (" + options +
                          ")");
      }
      out[d.choice] = value;
    }
  }
  return out;
}

std::optional<std::map<std::string, std::string>>
mdl::rt::defaultChoices(Model &model, const BackendDecl &backend,
                        std::string &error) {
  try {
    return defaultChoices(model, backend);
  } catch (EvalError &e) {
    error = e.text();
    return std::nullopt;
  }
}

std::optional<BoundLayout>
mdl::rt::bindModel(Model &model, const BackendDecl &backend,
                   const std::map<std::string, std::string> &choices,
                   std::string &error) {
  std::vector<EvalError> errors;
  std::optional<BoundLayout> out = bindModel(model, backend, choices, errors);
  if (!out)
    error = errors.front().text();
  return out;
}

std::optional<BoundLayout>
mdl::rt::bindModel(Model &model, const BackendDecl &backend,
                   const std::map<std::string, std::string> &choices,
                   std::vector<EvalError> &errors) {
  auto bound = std::make_shared<std::map<std::string, std::string>>();
  for (const auto &[name, value] : choices) {
    auto it = std::find_if(backend.choices.begin(), backend.choices.end(),
                           [&](const auto &c) { return c.name == name; });
    if (it == backend.choices.end() ||
        std::find(it->options.begin(), it->options.end(), value) !=
            it->options.end())
      continue;
    std::string options;
    for (const std::string &o : it->options)
      options += " " + o;
    errors.push_back({"backend " + backend.name + " has no option '" + value +
                          "' for choice '" + name + "' (options:" + options +
                          ")",
                      it->where});
    return std::nullopt;
  }
  BoundLayout out;
  Binder binder(model, backend, bound, out);
  try {
    *bound = defaultChoices(model, backend);
    for (const auto &[name, value] : choices)
      if (bound->count(name))
        (*bound)[name] = value;
    binder.run();
  } catch (EvalError &e) {
    errors = e.reported ? std::move(binder.errors)
                        : std::vector<EvalError>{std::move(e)};
    if (errors.empty()) // a bug: a failure counted but never said
      errors.push_back({"internal error: binding failed without a message"});
    return std::nullopt;
  }
  return out;
}

std::optional<std::string> mdl::rt::deeperThan(Instance &asked, Instance &has,
                                               const std::string &configPath) {
  for (auto &[name, elements] : asked.stacks) {
    auto it = has.stacks.find(name);
    size_t have = it == has.stacks.end() ? 0 : it->second.size();
    std::string stack = asked.path.empty() ? name : asked.path + "." + name;
    if (elements.size() > have)
      return "the overrides ask for " + std::to_string(elements.size()) +
             " elements of stack '" + stack + "', but the checkpoint's " +
             "config (" + configPath + ") has " + std::to_string(have);
    for (size_t i = 0; i < elements.size(); ++i)
      if (auto e = deeperThan(*elements[i], *it->second[i], configPath))
        return e;
  }
  for (auto &[name, child] : asked.instances) {
    auto it = has.instances.find(name);
    if (it == has.instances.end())
      return "the overrides ask for " + child->describe() +
             ", which the checkpoint's config (" + configPath +
             ") does not have";
    if (child->module == it->second->module)
      if (auto e = deeperThan(*child, *it->second, configPath))
        return e;
  }
  return std::nullopt;
}
