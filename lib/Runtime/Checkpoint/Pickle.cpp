//===- Pickle.cpp - Python pickles, read without running them -------------===//

#include "Checkpoint/Pickle.h"
#include "mdl/Runtime/Checkpoint/TorchCheckpoint.h"

#include <cerrno>
#include <cstring>
#include <limits>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::pickle;

namespace {

/// Storage classes by dtype, as torch.save names them in persistent ids,
/// with the dtype's name in torch.
struct StorageClass {
  DType dtype;
  std::string_view name, torchName;
};
constexpr StorageClass kStorageClasses[] = {
    {DType::BF16, "BFloat16Storage", "bfloat16"},
    {DType::F16, "HalfStorage", "float16"},
    {DType::F32, "FloatStorage", "float32"},
    {DType::F64, "DoubleStorage", "float64"},
    {DType::I64, "LongStorage", "int64"},
    {DType::I32, "IntStorage", "int32"},
    {DType::I16, "ShortStorage", "int16"},
    {DType::I8, "CharStorage", "int8"},
    {DType::U8, "ByteStorage", "uint8"},
    {DType::Bool, "BoolStorage", "bool"},
    {DType::F8E4M3, "Float8_e4m3fnStorage", "float8_e4m3fn"},
    {DType::F8E5M2, "Float8_e5m2Storage", "float8_e5m2"},
};
/// Other names torch gives dtypes (torch.half is torch.float16).
constexpr std::pair<std::string_view, DType> kDTypeAliases[] = {
    {"half", DType::F16},  {"float", DType::F32}, {"double", DType::F64},
    {"long", DType::I64},  {"int", DType::I32},   {"short", DType::I16},
};

bool isInt(const Value *v) { return v && v->kind == Value::Int; }

} // namespace

std::string_view mdl::rt::pickle::storageClassOf(DType t) {
  for (const StorageClass &c : kStorageClasses)
    if (c.dtype == t)
      return c.name;
  return "ByteStorage";
}

bool mdl::rt::pickle::dtypeOfStorageClass(std::string_view cls, DType &out) {
  for (const StorageClass &c : kStorageClasses)
    if (cls == c.name) {
      out = c.dtype;
      return true;
    }
  return false;
}

bool mdl::rt::pickle::dtypeOfTorchGlobal(std::string_view global, DType &out) {
  if (global.compare(0, 6, "torch.") != 0)
    return false;
  std::string_view name = global.substr(6);
  for (const StorageClass &c : kStorageClasses)
    if (name == c.torchName) {
      out = c.dtype;
      return true;
    }
  for (const auto &[alias, dtype] : kDTypeAliases)
    if (name == alias) {
      out = dtype;
      return true;
    }
  return false;
}

std::string mdl::rt::pickle::torchDTypeName(DType t) {
  for (const StorageClass &c : kStorageClasses)
    if (c.dtype == t)
      return "torch." + std::string(c.torchName);
  return "torch.uint8";
}

const char *mdl::rt::pickle::kindName(Value::Kind k) {
  static const char *const names[] = {
      "None",   "a bool",    "an int",   "a float",  "a string",
      "bytes",  "a tuple",   "a list",   "a dict",   "a global",
      "an object (a call the reader does not run)", "a storage", "a tensor",
      "a mark"};
  return names[k];
}

std::string mdl::rt::pickle::listText(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

bool mdl::rt::pickle::intTuple(const Value *v, std::vector<int64_t> &out) {
  if (!v || (v->kind != Value::Tuple && v->kind != Value::List))
    return false;
  out.clear();
  for (const Value *x : v->items) {
    if (!isInt(x))
      return false;
    out.push_back(x->i);
  }
  return true;
}

std::string_view Value::callee() const {
  if (kind != Object || items.empty() || !items[0] ||
      items[0]->kind != Global)
    return {};
  return items[0]->s;
}

const std::vector<Value *> &Value::args() const {
  static const std::vector<Value *> none;
  if (kind != Object || items.size() < 2 || !items[1] ||
      items[1]->kind != Tuple)
    return none;
  return items[1]->items;
}

const Value *Value::state() const {
  return kind == Object && items.size() > 2 ? items[2] : nullptr;
}

const Value *Value::get(std::string_view key) const {
  if (kind != Dict)
    return nullptr;
  for (size_t k = 0; k + 1 < items.size(); k += 2)
    if (items[k] && items[k]->kind == Str && items[k]->s == key)
      return items[k + 1];
  return nullptr;
}

const Value *Value::attr(std::string_view name) const {
  const Value *st = state();
  return st ? st->get(name) : nullptr;
}

namespace mdl::rt::pickle {

struct Unpickler::State {
  State(const uint8_t *data, size_t size, const ZipFile *zip,
        std::string prefix)
      : zip(zip), prefix(std::move(prefix)), p(data), end(data + size) {
    markValue.kind = Value::Mark;
  }

  Value *load(std::string &error);

  Value *make(Value::Kind k) {
    arena.push_back(std::make_unique<Value>());
    arena.back()->kind = k;
    return arena.back().get();
  }
  /// An object the reader knows nothing of.
  Value *makeObject() {
    Value *v = make(Value::Object);
    v->items = {nullptr, nullptr, nullptr};
    return v;
  }
  bool need(size_t n) {
    if (size_t(end - p) >= n)
      return true;
    return failAt("the pickle is truncated");
  }
  bool failAt(const std::string &message) {
    if (err.empty())
      err = message + " (at byte " + std::to_string(opStart) + " of the pickle)";
    return false;
  }
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k)
      v = (v << 8) | p[k];
    p += n;
    return v;
  }
  bool line(std::string &out) {
    const uint8_t *nl = static_cast<const uint8_t *>(
        std::memchr(p, '\n', size_t(end - p)));
    if (!nl)
      return failAt("the pickle is truncated (no end of line)");
    out.assign(reinterpret_cast<const char *>(p), size_t(nl - p));
    p = nl + 1;
    return true;
  }
  bool pop(Value *&v) {
    if (stack.empty() || stack.back()->kind == Value::Mark)
      return failAt("the pickle pops from an empty stack");
    v = stack.back();
    stack.pop_back();
    return true;
  }
  /// The items above the topmost mark, which is removed.
  bool popMark(std::vector<Value *> &items) {
    size_t m = stack.size();
    while (m > 0 && stack[m - 1]->kind != Value::Mark)
      --m;
    if (m == 0)
      return failAt("the pickle has no mark to pop to");
    items.assign(stack.begin() + long(m), stack.end());
    stack.resize(m - 1);
    return true;
  }
  /// Replaces the items above the topmost mark with a `k` holding them.
  bool pushMarked(Value::Kind k) {
    std::vector<Value *> items;
    if (!popMark(items))
      return false;
    Value *v = make(k);
    if (k == Value::Dict)
      items.resize(items.size() & ~size_t(1)); // whole key-value pairs
    v->items = std::move(items);
    stack.push_back(v);
    return true;
  }
  bool top(Value *&v) {
    if (stack.empty() || stack.back()->kind == Value::Mark)
      return failAt("the pickle reads an empty stack");
    v = stack.back();
    return true;
  }
  bool pushString(Value::Kind k, uint64_t n) {
    if (!need(size_t(std::min<uint64_t>(n, SIZE_MAX))))
      return false;
    Value *v = make(k);
    v->s.assign(reinterpret_cast<const char *>(p), size_t(n));
    p += n;
    stack.push_back(v);
    return true;
  }
  bool pushInt(int64_t i) {
    Value *v = make(Value::Int);
    v->i = i;
    stack.push_back(v);
    return true;
  }
  bool longInt(uint64_t n) {
    if (!need(size_t(std::min<uint64_t>(n, SIZE_MAX))))
      return false;
    if (n > 8) { // beyond int64: kept as an inert object
      p += n;
      stack.push_back(makeObject());
      return true;
    }
    uint64_t v = 0;
    for (uint64_t k = n; k-- > 0;)
      v = (v << 8) | p[k];
    if (n > 0 && n < 8 && (p[n - 1] & 0x80))
      v |= ~uint64_t(0) << (8 * n); // sign-extend
    p += n;
    return pushInt(int64_t(v));
  }
  bool memoPut(uint64_t key) {
    Value *v = nullptr;
    if (!top(v))
      return false;
    memo[key] = v;
    return true;
  }
  bool memoGet(uint64_t key) {
    auto it = memo.find(key);
    if (it == memo.end())
      return failAt("the pickle reads memo entry " + std::to_string(key) +
                    ", which it never stored");
    stack.push_back(it->second);
    return true;
  }
  bool global(std::string module, std::string name) {
    Value *v = make(Value::Global);
    v->s = module + "." + name;
    stack.push_back(v);
    return true;
  }
  bool call(Value *callable, Value *args, Value *&out);
  bool persistent(Value *pid);
  bool tensorFrom(const std::vector<Value *> &args, Value *&out);

  const ZipFile *zip;
  std::string prefix;
  const uint8_t *p, *end;
  size_t opStart = 0;
  std::string err;
  std::vector<std::unique_ptr<Value>> arena;
  std::vector<Value *> stack;
  std::map<uint64_t, Value *> memo;
  Value markValue;
};

bool isInt(const Value *v) { return v && v->kind == Value::Int; }



bool Unpickler::State::persistent(Value *pid) {
  if (!zip)
    return failAt("the pickle refers to data outside it (a persistent id), "
                  "which only a torch.save archive has");
  // ('storage', storage class, key, location, numel)
  auto text = [](const Value *v) {
    return v && (v->kind == Value::Str || v->kind == Value::Bytes);
  };
  if (!pid || pid->kind != Value::Tuple || pid->items.size() != 5 ||
      !text(pid->items[0]) || pid->items[0]->s != "storage" ||
      !pid->items[1] || pid->items[1]->kind != Value::Global ||
      !text(pid->items[2]) || !isInt(pid->items[4]))
    return failAt("a persistent id is not a storage reference");
  const std::string &cls = pid->items[1]->s;
  Value *s = make(Value::Storage);
  bool known = cls.compare(0, 6, "torch.") == 0 &&
               dtypeOfStorageClass(std::string_view(cls).substr(6), s->dtype);
  if (!known && cls != "torch.UntypedStorage")
    return failAt("storage class '" + cls + "' is not one the reader knows");
  s->s = pid->items[2]->s;
  s->numel = pid->items[4]->i;
  std::string entry = prefix + "data/" + s->s;
  s->storage = zip->find(entry);
  if (!s->storage)
    return failAt("storage '" + s->s + "' is missing from the archive (no '" +
                  entry + "')");
  uint64_t bytes = uint64_t(std::max<int64_t>(0, s->numel)) * byteSize(s->dtype);
  if (s->numel < 0 || s->storage->size < bytes)
    return failAt("storage '" + s->s + "' holds " +
                  std::to_string(s->storage->size) + " bytes, fewer than its " +
                  std::to_string(s->numel) + " elements of " +
                  std::string(safetensorsName(s->dtype)) + " need");
  stack.push_back(s);
  return true;
}

/// _rebuild_tensor_v2(storage, storage_offset, size, stride, ...).
bool Unpickler::State::tensorFrom(const std::vector<Value *> &args, Value *&out) {
  if (args.size() < 4 || !args[0] || args[0]->kind != Value::Storage ||
      !isInt(args[1]))
    return failAt("a tensor is rebuilt from arguments that are not a "
                  "storage, an offset, sizes and strides");
  Value *t = make(Value::Tensor);
  const Value *s = args[0];
  t->dtype = s->dtype;
  t->storage = s->storage;
  t->numel = s->numel;
  t->offset = args[1]->i;
  if (!intTuple(args[2], t->sizes) || !intTuple(args[3], t->strides) ||
      t->sizes.size() != t->strides.size())
    return failAt("a tensor's sizes and strides are not two tuples of "
                  "integers of one length");
  // The elements it spans must be in the storage.
  int64_t last = t->offset, count = 1;
  bool empty = false;
  for (size_t d = 0; d < t->sizes.size(); ++d) {
    if (t->sizes[d] < 0 || t->strides[d] < 0)
      return failAt("a tensor has a negative size or stride");
    empty = empty || t->sizes[d] == 0;
    if (t->sizes[d] > 0 &&
        (t->strides[d] > (INT64_MAX - last) / std::max<int64_t>(1, t->sizes[d]) ||
         count > INT64_MAX / t->sizes[d]))
      return failAt("a tensor's size overflows");
    if (t->sizes[d] > 0) {
      last += (t->sizes[d] - 1) * t->strides[d];
      count *= t->sizes[d];
    }
  }
  if (t->offset < 0 || t->offset > s->numel || (!empty && last >= s->numel))
    return failAt("a tensor of sizes " + listText(t->sizes) + " strides " +
                  listText(t->strides) + " at offset " +
                  std::to_string(t->offset) + " reaches element " +
                  std::to_string(last) + " of storage '" + s->s +
                  "', which holds " + std::to_string(s->numel));
  out = t;
  return true;
}

/// What calling `callable` with `args` gives, without calling anything: a
/// tensor, an ordered dict, or an inert object.
bool Unpickler::State::call(Value *callable, Value *args, Value *&out) {
  std::string name;
  std::vector<Value *> a;
  // _rebuild_from_type_v2(func, type, args, state) is func(*args); a few
  // such wrappings are unwrapped, more are an inert object.
  for (int wraps = 0; wraps < 4; ++wraps) {
    name = callable && callable->kind == Value::Global ? callable->s : "";
    a.clear();
    if (args && args->kind == Value::Tuple)
      a = args->items;
    if (name != "torch._tensor._rebuild_from_type_v2" || a.size() < 3)
      break;
    callable = a[0];
    args = a[2];
  }
  if (name == "torch._utils._rebuild_tensor_v2" ||
      name == "torch._utils._rebuild_tensor")
    return tensorFrom(a, out);
  if ((name == "torch._utils._rebuild_parameter" ||
       name == "torch._utils._rebuild_parameter_with_state" ||
       name == "torch.nn.parameter.Parameter") &&
      !a.empty() && a[0] && a[0]->kind == Value::Tensor) {
    out = a[0];
    return true;
  }
  if (name == "collections.OrderedDict" && a.empty()) {
    out = make(Value::Dict);
    return true;
  }
  out = make(Value::Object);
  out->items = {callable, args, nullptr};
  return true;
}

Value *Unpickler::State::load(std::string &error) {
  const uint8_t *start = p;
  auto fail = [&]() -> Value * {
    error = err;
    return nullptr;
  };
  while (true) {
    opStart = size_t(p - start);
    if (arena.size() > kMaxPickleValues) {
      failAt("the pickle builds more than " + std::to_string(kMaxPickleValues) +
             " values");
      return fail();
    }
    if (!need(1))
      return fail();
    uint8_t op = *p++;
    Value *a = nullptr, *b = nullptr, *c = nullptr;
    std::vector<Value *> items;
    std::string text, text2;
    bool ok = true;
    switch (op) {
    case 0x80: // PROTO
      ok = need(1);
      p += ok;
      break;
    case 0x95: // FRAME
      ok = need(8);
      if (ok)
        p += 8;
      break;
    case '.': // STOP
      if (!pop(a))
        return fail();
      return a;
    case '(':
      stack.push_back(&markValue);
      break;
    case '0':
      ok = pop(a);
      break;
    case '1':
      ok = popMark(items);
      break;
    case '2':
      ok = top(a);
      if (ok)
        stack.push_back(a);
      break;
    case 'N':
      stack.push_back(make(Value::None));
      break;
    case 0x88:
    case 0x89:
      a = make(Value::Bool);
      a->i = op == 0x88;
      stack.push_back(a);
      break;
    case 'I':
    case 'L': {
      ok = line(text);
      if (!ok)
        break;
      if (!text.empty() && text.back() == 'L')
        text.pop_back();
      if (text == "01" || text == "00") {
        a = make(Value::Bool);
        a->i = text == "01";
        stack.push_back(a);
        break;
      }
      char *e = nullptr;
      errno = 0;
      long long v = std::strtoll(text.c_str(), &e, 10);
      if (text.empty() || *e || errno)
        stack.push_back(makeObject()); // not an int64: inert
      else
        pushInt(v);
      break;
    }
    case 'J':
      ok = need(4);
      if (ok)
        pushInt(int32_t(uint32_t(le(4))));
      break;
    case 'K':
      ok = need(1);
      if (ok)
        pushInt(int64_t(le(1)));
      break;
    case 'M':
      ok = need(2);
      if (ok)
        pushInt(int64_t(le(2)));
      break;
    case 0x8a: // LONG1
      ok = need(1) && longInt(le(1));
      break;
    case 0x8b: // LONG4
      ok = need(4) && longInt(le(4));
      break;
    case 'G': { // BINFLOAT, big-endian
      ok = need(8);
      if (!ok)
        break;
      uint64_t bits = 0;
      for (int k = 0; k < 8; ++k)
        bits = (bits << 8) | p[k];
      p += 8;
      a = make(Value::Float);
      std::memcpy(&a->f, &bits, 8);
      stack.push_back(a);
      break;
    }
    case 'F':
      ok = line(text);
      if (ok) {
        a = make(Value::Float);
        a->f = std::strtod(text.c_str(), nullptr);
        stack.push_back(a);
      }
      break;
    case 'X':
      ok = need(4) && pushString(Value::Str, le(4));
      break;
    case 0x8c: // SHORT_BINUNICODE
      ok = need(1) && pushString(Value::Str, le(1));
      break;
    case 0x8d: // BINUNICODE8
      ok = need(8) && pushString(Value::Str, le(8));
      break;
    case 'T': // BINSTRING
      ok = need(4) && pushString(Value::Str, le(4));
      break;
    case 'U': // SHORT_BINSTRING
      ok = need(1) && pushString(Value::Str, le(1));
      break;
    case 'B':
      ok = need(4) && pushString(Value::Bytes, le(4));
      break;
    case 'C':
      ok = need(1) && pushString(Value::Bytes, le(1));
      break;
    case 0x8e: // BINBYTES8
    case 0x96: // BYTEARRAY8
      ok = need(8) && pushString(Value::Bytes, le(8));
      break;
    case 'V':
    case 'S': // text strings: kept as they are written
      ok = line(text);
      if (ok) {
        a = make(Value::Str);
        a->s = text;
        stack.push_back(a);
      }
      break;
    case ')':
      stack.push_back(make(Value::Tuple));
      break;
    case 't':
      ok = pushMarked(Value::Tuple);
      break;
    case 0x85:
    case 0x86:
    case 0x87: {
      size_t n = size_t(op - 0x84);
      a = make(Value::Tuple);
      a->items.resize(n);
      for (size_t k = n; ok && k-- > 0;)
        ok = pop(a->items[k]);
      if (ok)
        stack.push_back(a);
      break;
    }
    case ']':
      stack.push_back(make(Value::List));
      break;
    case 0x8f: // EMPTY_SET
      stack.push_back(make(Value::List));
      break;
    case 'l':
    case 0x91: // FROZENSET
      ok = pushMarked(Value::List);
      break;
    case 'a':
      ok = pop(b) && top(a);
      if (ok && a->kind == Value::List)
        a->items.push_back(b);
      break;
    case 'e':
    case 0x90: // ADDITEMS
      ok = popMark(items) && top(a);
      if (ok && a->kind == Value::List)
        a->items.insert(a->items.end(), items.begin(), items.end());
      break;
    case '}':
      stack.push_back(make(Value::Dict));
      break;
    case 'd':
      ok = pushMarked(Value::Dict);
      break;
    case 's':
      ok = pop(c) && pop(b) && top(a);
      if (ok && a->kind == Value::Dict) {
        a->items.push_back(b);
        a->items.push_back(c);
      }
      break;
    case 'u':
      ok = popMark(items) && top(a);
      if (ok && items.size() % 2)
        ok = failAt("SETITEMS has an odd number of items");
      if (ok && a->kind == Value::Dict)
        a->items.insert(a->items.end(), items.begin(), items.end());
      break;
    case 'c': // GLOBAL
      ok = line(text) && line(text2) && global(text, text2);
      break;
    case 0x93: // STACK_GLOBAL
      ok = pop(b) && pop(a);
      if (ok && (a->kind != Value::Str || b->kind != Value::Str))
        ok = failAt("STACK_GLOBAL takes two strings");
      if (ok)
        ok = global(a->s, b->s);
      break;
    case 'R': // REDUCE
    case 0x81: // NEWOBJ
      ok = pop(b) && pop(a) && call(a, b, c);
      if (ok)
        stack.push_back(c);
      break;
    case 0x92: // NEWOBJ_EX
      ok = pop(c) && pop(b) && pop(a) && call(a, b, c);
      if (ok)
        stack.push_back(c);
      break;
    case 'b': // BUILD: an object keeps its state; others ignore it
      ok = pop(b) && top(a);
      if (ok && a->kind == Value::Object)
        a->items[2] = b;
      break;
    case 'i': // INST: the arguments are dropped with the class
      ok = line(text) && line(text2) && popMark(items);
      if (ok)
        stack.push_back(makeObject());
      break;
    case 'o': // OBJ
      ok = popMark(items);
      if (ok)
        stack.push_back(makeObject());
      break;
    case 'p': // PUT
      ok = line(text) && memoPut(std::strtoull(text.c_str(), nullptr, 10));
      break;
    case 'q':
      ok = need(1) && memoPut(le(1));
      break;
    case 'r':
      ok = need(4) && memoPut(le(4));
      break;
    case 0x94: // MEMOIZE
      ok = memoPut(memo.size());
      break;
    case 'g':
      ok = line(text) && memoGet(std::strtoull(text.c_str(), nullptr, 10));
      break;
    case 'h':
      ok = need(1) && memoGet(le(1));
      break;
    case 'j':
      ok = need(4) && memoGet(le(4));
      break;
    case 'Q': // BINPERSID
      ok = pop(a) && persistent(a);
      break;
    case 'P': // PERSID
      ok = line(text);
      if (ok)
        ok = failAt("a text persistent id is not a storage reference");
      break;
    case 0x82: // EXT1, EXT2, EXT4: the extension registry, inert
    case 0x83:
    case 0x84: {
      int n = op == 0x82 ? 1 : op == 0x83 ? 2 : 4;
      ok = need(size_t(n));
      if (ok) {
        p += n;
        stack.push_back(make(Value::Global));
      }
      break;
    }
    default:
      ok = failAt("the pickle has opcode " + std::to_string(op) +
                  ", which the reader does not know");
    }
    if (!ok)
      return fail();
  }
}


} // namespace mdl::rt::pickle

Unpickler::Unpickler(const uint8_t *data, size_t size, const ZipFile *zip,
                     std::string prefix)
    : s(std::make_unique<State>(data, size, zip, std::move(prefix))) {}

Unpickler::~Unpickler() = default;

Value *Unpickler::load(std::string &error) { return s->load(error); }
