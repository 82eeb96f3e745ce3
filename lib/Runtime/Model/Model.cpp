//===- Model.cpp - Instantiating generated models -------------------------===//
//
// Instantiation over the declarations generated code gives: values on
// demand and memoized per instance, parameters with concrete sizes, children
// by the first case whose guard holds (Bind.cpp binds the result to a
// backend). Errors travel as EvalError inside and come out as a message that
// starts with the spec location.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Model/Model.h"
#include "mdl/Runtime/Model/ChoiceReads.h"
#include "mdl/Runtime/Base/File.h"
#include "Model/Evaluation.h"

#include <algorithm>
#include <functional>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::detail;


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
  Model &model = *scope.model;
  const json::Value *j = model.config().lookup(path);
  bool isInt = std::string_view(type) == "int";
  if (!j || j->isNull()) {
    if (isInt && model.sizeKeys)
      model.sizeKeys->push_back({path, /*missing=*/true, 0, ""});
    return Value::missing({path});
  }
  Value out;
  std::string error;
  bool read = valueFromJson(*j, type, out, error);
  if (read && isInt && out.i < 1 && model.sizeKeys)
    model.sizeKeys->push_back({path, false, out.i, model.config().locate(*j)});
  if (!read) {
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

namespace {
thread_local ChoiceReads *innermostReads = nullptr;
} // namespace

ChoiceReads::ChoiceReads() : outer(innermostReads) { innermostReads = this; }

ChoiceReads::~ChoiceReads() { innermostReads = outer; }

void ChoiceReads::note(const char *name) {
  for (ChoiceReads *r = innermostReads; r; r = r->outer)
    r->read.insert(name);
}

Value Eval::choice(const char *name, const char *first) {
  if (innermostReads)
    ChoiceReads::note(name);
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

//===----------------------------------------------------------------------===//
// Instance
//===----------------------------------------------------------------------===//

std::string Instance::describe() const {
  return (path.empty() ? "the model" : path) + " (" + module->name + ")";
}

const Value &Instance::get(const std::string &name) {
  if (auto it = cache.find(name); it != cache.end()) {
    if (model->sizeKeys)
      if (auto k = keysOf.find(name); k != keysOf.end())
        model->sizeKeys->insert(model->sizeKeys->end(), k->second.begin(),
                                k->second.end());
    return it->second;
  }
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
  // The size keys it reads are collected for it, then added to those of
  // the evaluation that needs it.
  std::vector<SizeKey> keys;
  std::vector<SizeKey> *outer = model->sizeKeys;
  model->sizeKeys = &keys;
  struct Done {
    std::map<std::string, bool> &m;
    const std::string &n;
    int &depth;
    std::vector<SizeKey> *&sink, *outer;
    ~Done() {
      m[n] = false;
      --depth;
      sink = outer;
    }
  } done{inProgress, name, model->evalDepth, model->sizeKeys, outer};

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
      if (decl->kind == ValueDecl::Input || decl->kind == ValueDecl::InputDim) {
        if (auto it = inputs.find(name); it != inputs.end()) {
          if (auto k = inputKeys.find(name); k != inputKeys.end())
            keys = k->second;
          return it->second;
        }
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
    if ((decl->kind == ValueDecl::Dim || decl->kind == ValueDecl::InputDim) &&
        result.i <= 0) {
      EvalError e = model->sizeError(
          "dimension '" + name + "' of " + describe(), result.i, keys);
      e.where = decl->where;
      throw e;
    }
  } catch (EvalError &e) {
    report(e);
    throw;
  }
  if (!keys.empty()) {
    if (outer)
      outer->insert(outer->end(), keys.begin(), keys.end());
    keysOf[name] = std::move(keys);
  }
  return cache[name] = std::move(result);
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

EvalError Model::sizeError(const std::string &what, int64_t size,
                           const std::vector<SizeKey> &keys) const {
  // The keys that hold a value below 1 say the most; else the absent ones.
  std::vector<const SizeKey *> named;
  for (bool missing : {false, true}) {
    for (const SizeKey &k : keys)
      if (k.missing == missing &&
          std::none_of(named.begin(), named.end(),
                       [&](const SizeKey *n) { return n->key == k.key; }))
        named.push_back(&k);
    if (!named.empty())
      break;
  }
  EvalError e{what + " has size " + std::to_string(size) +
              "; sizes must be positive"};
  if (!named.empty() && named.front()->missing) {
    // Keys tried in turn (`hf("a") ?? hf("b") ?? 0`).
    std::string keys;
    for (size_t i = 0; i < named.size(); ++i)
      keys += (i ? ", '" : "'") + named[i]->key + "'";
    e.message += std::string(named.size() == 1 ? ": " : ": none of ") + keys +
                 " is in '" + hfConfig.path() + "'";
    return e;
  }
  for (size_t i = 0; i < named.size(); ++i) {
    const SizeKey &k = *named[i];
    e.message +=
        (i ? ", '" : ": '") + k.key + "' is " + std::to_string(k.value) +
        (k.at.empty() ? " (from --set)" : " in '" + hfConfig.path() + "'");
    if (!k.at.empty())
      e.notes.push_back({k.at, "the value is here"});
  }
  return e;
}

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
    if (d.mxfp4 && at(d.where, [&] {
          return evalOne(node, d.mxfp4Cond, Value::boolean(true));
        }).i) {
      // Its scales cover blocks of 32 inputs, which must be whole.
      ParamInstance &w = node.params.back();
      w.mxfp4 = true;
      size_t lead = d.expert.empty() ? 0 : 1;
      int64_t in = 1;
      std::string names;
      for (size_t a = lead + size_t(d.outAxes); a < w.axes.size(); ++a)
        for (const std::string &name : w.axes[a]) {
          in *= node.get(name).i;
          names += (names.empty() ? "" : " x ") + name;
        }
      if (in % kMxfp4Block != 0)
        fail(d.where, "the MXFP4 weight '" + w.path + "' has " +
                          std::to_string(in) + " inputs (" + names +
                          "), not a multiple of its scale blocks of " +
                          std::to_string(kMxfp4Block));
    }
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
    for (const auto &[name, expr] : k.args) {
      // A dimension is checked where it is bound.
      std::vector<SizeKey> keys;
      std::vector<SizeKey> *outer = sizeKeys;
      sizeKeys = &keys;
      struct Restore {
        std::vector<SizeKey> *&sink, *outer;
        ~Restore() { sink = outer; }
      } restore{sizeKeys, outer};
      Value v = at(c.where, [&] {
        return evalOne(parent, expr, {}, nullptr, nullptr, args);
      });
      auto decl =
          std::find_if(callee->values.begin(), callee->values.end(),
                       [&](const ValueDecl &d) { return d.name == name; });
      if (decl != callee->values.end() && decl->kind == ValueDecl::InputDim &&
          v.i <= 0) {
        EvalError e = sizeError(
            "dimension '" + name + "' of " + child->describe(), v.i, keys);
        e.where = c.where;
        throw e;
      }
      child->inputs[name] = std::move(v);
      if (!keys.empty())
        child->inputKeys[name] = std::move(keys);
    }
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
      size_t before = paramCount;
      build(*child);
      elements.push_back(std::move(child));
      // A stack whose elements are alike would pass the bound on
      // parameters: it is refused before it is built.
      size_t each = paramCount - before;
      if (i == 0 && count > 1 && each > 0 &&
          size_t(count - 1) > (kMaxParams - paramCount) / each)
        fail(c.where, "stack '" + c.name + "' has length " +
                          std::to_string(count) + " and its first element " +
                          std::to_string(each) +
                          " parameters: the model would have more than " +
                          std::to_string(kMaxParams) +
                          " parameters; the config's sizes are out of bounds");
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
