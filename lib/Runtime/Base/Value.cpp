//===- Value.cpp - Values of the MDL expression language ------------------===//

#include "mdl/Runtime/Base/Value.h"

#include <algorithm>
#include <limits>

using namespace mdl;
using namespace mdl::rt;

Value Value::integer(int64_t v) {
  Value e;
  e.kind = Int;
  e.i = v;
  return e;
}

Value Value::boolean(bool v) {
  Value e;
  e.kind = Bool;
  e.i = v;
  return e;
}

Value Value::string(std::string v) {
  Value e;
  e.kind = String;
  e.s = std::move(v);
  return e;
}

Value Value::dtypeOf(mdl::DType d) {
  Value e;
  e.kind = DType;
  e.dtype = d;
  return e;
}

Value Value::listOf(std::vector<Value> elements) {
  Value e;
  e.kind = List;
  e.list = std::move(elements);
  return e;
}

Value Value::missing(std::vector<std::string> keys) {
  Value e;
  e.triedKeys = std::move(keys);
  return e;
}

bool Value::operator==(const Value &o) const {
  if (kind != o.kind)
    return false;
  switch (kind) {
  case Missing:
    return true;
  case Int:
  case Bool:
    return i == o.i;
  case String:
    return s == o.s;
  case DType:
    return dtype == o.dtype;
  case List:
    return list == o.list;
  }
  return false;
}

json::Value mdl::rt::toJson(const Value &v) {
  switch (v.kind) {
  case Value::Missing:
    return json::Value::null();
  case Value::Int:
    return json::Value::integer(v.i);
  case Value::Bool:
    return json::Value::boolean(v.i);
  case Value::String:
    return json::Value::string(v.s);
  case Value::DType:
    return json::Value::string(std::string(safetensorsName(v.dtype)));
  case Value::List: {
    json::Value a = json::Value::array();
    for (const Value &e : v.list)
      a.push(toJson(e));
    return a;
  }
  }
  return json::Value::null();
}

std::string Value::str() const {
  if (kind == Missing)
    return "<missing>";
  if (kind == DType)
    return std::string(specName(dtype));
  return json::write(toJson(*this));
}

std::string_view mdl::rt::binaryOpSpelling(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add: return "+";
  case BinaryOp::Sub: return "-";
  case BinaryOp::Mul: return "*";
  case BinaryOp::Div: return "/";
  case BinaryOp::Mod: return "%";
  case BinaryOp::Concat: return "+";
  case BinaryOp::Lt: return "<";
  case BinaryOp::Le: return "<=";
  case BinaryOp::Gt: return ">";
  case BinaryOp::Ge: return ">=";
  case BinaryOp::Eq: return "==";
  case BinaryOp::Ne: return "!=";
  case BinaryOp::And: return "&&";
  case BinaryOp::Or: return "||";
  }
  return "?";
}

/// Floor division, as Python does.
static int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}

bool mdl::rt::applyBinary(BinaryOp op, const Value &l, const Value &r,
                          Value &out, std::string &error) {
  int64_t x = l.i, y = r.i, n = 0;
  auto overflow = [&] {
    error = "integer overflow: " + std::to_string(x) + " " +
            std::string(binaryOpSpelling(op)) + " " + std::to_string(y) +
            " does not fit in 64 bits";
    return false;
  };
  switch (op) {
  case BinaryOp::Add:
    if (__builtin_add_overflow(x, y, &n))
      return overflow();
    out = Value::integer(n);
    return true;
  case BinaryOp::Sub:
    if (__builtin_sub_overflow(x, y, &n))
      return overflow();
    out = Value::integer(n);
    return true;
  case BinaryOp::Mul:
    if (__builtin_mul_overflow(x, y, &n))
      return overflow();
    out = Value::integer(n);
    return true;
  case BinaryOp::Div:
  case BinaryOp::Mod:
    if (y == 0) {
      error = std::string(op == BinaryOp::Div ? "division" : "modulo") +
              " by zero (" + std::to_string(x) +
              (op == BinaryOp::Div ? " / 0)" : " % 0)");
      return false;
    }
    if (x == std::numeric_limits<int64_t>::min() && y == -1)
      return overflow();
    n = floorDiv(x, y);
    out = Value::integer(op == BinaryOp::Div ? n : x - n * y);
    return true;
  case BinaryOp::Concat:
    out = l;
    if (out.kind == Value::String)
      out.s += r.s;
    else
      out.list.insert(out.list.end(), r.list.begin(), r.list.end());
    return true;
  case BinaryOp::Lt: out = Value::boolean(x < y); return true;
  case BinaryOp::Le: out = Value::boolean(x <= y); return true;
  case BinaryOp::Gt: out = Value::boolean(x > y); return true;
  case BinaryOp::Ge: out = Value::boolean(x >= y); return true;
  case BinaryOp::Eq: out = Value::boolean(l == r); return true;
  case BinaryOp::Ne: out = Value::boolean(l != r); return true;
  case BinaryOp::And: out = Value::boolean(x && y); return true;
  case BinaryOp::Or: out = Value::boolean(x || y); return true;
  }
  error = "unknown operator";
  return false;
}

bool mdl::rt::applyNeg(const Value &v, Value &out, std::string &error) {
  if (v.i == std::numeric_limits<int64_t>::min()) {
    error = "integer overflow in negation";
    return false;
  }
  out = Value::integer(-v.i);
  return true;
}

bool mdl::rt::applyIndex(const Value &list, const Value &index, Value &out,
                         std::string &error) {
  if (index.i < 0 || size_t(index.i) >= list.list.size()) {
    error = "index " + std::to_string(index.i) +
            " is out of range for a list of " +
            std::to_string(list.list.size());
    return false;
  }
  out = list.list[size_t(index.i)];
  return true;
}

bool mdl::rt::applyContains(const Value &list, const Value &v) {
  return std::find(list.list.begin(), list.list.end(), v) != list.list.end();
}

bool mdl::rt::applyBuiltin(std::string_view name,
                           const std::vector<Value> &args, Value &out,
                           std::string &error) {
  if (name == "len") {
    out = Value::integer(args[0].kind == Value::String
                             ? int64_t(args[0].s.size())
                             : int64_t(args[0].list.size()));
    return true;
  }
  if (name == "range") {
    if (args[0].i < 0 || args[0].i > kMaxListLength) {
      error = "range(" + std::to_string(args[0].i) +
              ") must be between 0 and " + std::to_string(kMaxListLength);
      return false;
    }
    out = Value::listOf({});
    for (int64_t i = 0; i < args[0].i; ++i)
      out.list.push_back(Value::integer(i));
    return true;
  }
  if (name == "min" || name == "max") {
    out = Value::integer(name == "min" ? std::min(args[0].i, args[1].i)
                                       : std::max(args[0].i, args[1].i));
    return true;
  }
  if (name == "gcd") {
    int64_t a = args[0].i < 0 ? -args[0].i : args[0].i;
    int64_t b = args[1].i < 0 ? -args[1].i : args[1].i;
    while (b) {
      int64_t r = a % b;
      a = b;
      b = r;
    }
    out = Value::integer(a);
    return true;
  }
  if (name == "ceildiv") {
    if (args[1].i <= 0 || args[0].i < 0) {
      error = "ceildiv(" + std::to_string(args[0].i) + ", " +
              std::to_string(args[1].i) +
              ") needs a non-negative numerator and a positive denominator";
      return false;
    }
    out = Value::integer(args[0].i / args[1].i + (args[0].i % args[1].i != 0));
    return true;
  }
  if (name == "str") {
    out = Value::string(std::to_string(args[0].i));
    return true;
  }
  if (name == "pad") {
    if (args[1].i < 0 || args[1].i > 64) {
      error = "pad width " + std::to_string(args[1].i) +
              " must be between 0 and 64";
      return false;
    }
    std::string s = std::to_string(args[0].i);
    if (int64_t(s.size()) < args[1].i)
      s.insert(0, size_t(args[1].i) - s.size(), '0');
    out = Value::string(s);
    return true;
  }
  if (name == "dtype") {
    std::optional<mdl::DType> d = parseDType(args[0].s);
    if (!d) {
      error = "unknown dtype '" + args[0].s + "'";
      return false;
    }
    out = Value::dtypeOf(*d);
    return true;
  }
  if (name == "sum") {
    int64_t total = 0;
    for (const Value &v : args[0].list)
      if (__builtin_add_overflow(total, v.i, &total)) {
        error = "sum() overflows 64 bits";
        return false;
      }
    out = Value::integer(total);
    return true;
  }
  if (name == "chars") {
    // One string per character (UTF-8 sequence): the letters of a layer
    // pattern such as Nemotron-H's hybrid_override_pattern.
    std::vector<Value> list;
    const std::string &text = args[0].s;
    if (text.size() > size_t(kMaxListLength)) {
      error = "chars() of a string of " + std::to_string(text.size()) +
              " bytes: a list is at most " + std::to_string(kMaxListLength) +
              " long";
      return false;
    }
    for (size_t i = 0; i < text.size();) {
      size_t n = 1;
      while (i + n < text.size() && (uint8_t(text[i + n]) & 0xC0) == 0x80)
        ++n;
      list.push_back(Value::string(text.substr(i, n)));
      i += n;
    }
    out = Value::listOf(std::move(list));
    return true;
  }
  if (name == "ends_with") {
    const std::string &text = args[0].s, &suffix = args[1].s;
    out = Value::boolean(text.size() >= suffix.size() &&
                         text.compare(text.size() - suffix.size(),
                                      suffix.size(), suffix) == 0);
    return true;
  }
  if (name == "primes") {
    // The first `count` primes from `start` on, by trial division: meant
    // for the few hash sizes of n-gram tables, so both are bounded.
    int64_t start = args[0].i, count = args[1].i;
    if (start < 0 || start > (int64_t(1) << 40) || count < 0 ||
        count > 4096) {
      error = "primes(" + std::to_string(start) + ", " +
              std::to_string(count) +
              ") needs 0 <= start <= 2^40 and 0 <= count <= 4096";
      return false;
    }
    out = Value::listOf({});
    for (int64_t n = std::max<int64_t>(start, 2); int64_t(out.list.size()) < count;
         ++n) {
      bool prime = true;
      for (int64_t d = 2; d * d <= n && prime; ++d)
        prime = n % d != 0;
      if (prime)
        out.list.push_back(Value::integer(n));
    }
    return true;
  }
  if (name == "size") { // size(D): the value of the dimension
    out = args[0];
    return true;
  }
  error = "unknown builtin '" + std::string(name) + "'";
  return false;
}

bool mdl::rt::valueFromJson(const json::Value &j, std::string_view type,
                            Value &out, std::string &error) {
  auto mismatch = [&](std::string_view want) {
    error = "is " + std::string(json::Value::kindName(j.kind())) +
            ", but the spec reads " + std::string(want);
    return false;
  };
  if (type == "int") {
    if (j.kind() != json::Value::Int)
      return mismatch("an integer");
    out = Value::integer(j.asInt());
    return true;
  }
  if (type == "bool") {
    if (j.kind() != json::Value::Bool)
      return mismatch("a boolean");
    out = Value::boolean(j.asBool());
    return true;
  }
  if (type == "string") {
    if (j.kind() != json::Value::String)
      return mismatch("a string");
    out = Value::string(j.asString());
    return true;
  }
  if (type == "dtype") {
    if (j.kind() != json::Value::String)
      return mismatch("a dtype name");
    std::optional<mdl::DType> d = parseDType(j.asString());
    if (!d) {
      error = "names unknown dtype '" + j.asString() + "'";
      return false;
    }
    out = Value::dtypeOf(*d);
    return true;
  }
  if (type.substr(0, 5) != "list<" || type.back() != '>') {
    error = "has a type the runtime does not know: " + std::string(type);
    return false;
  }
  std::string_view element = type.substr(5, type.size() - 6);
  if (j.kind() != json::Value::Array)
    return mismatch("a list");
  if (j.elements().size() > size_t(kMaxListLength))
    return mismatch("a list of reasonable length");
  out = Value::listOf({});
  for (size_t i = 0; i < j.elements().size(); ++i) {
    Value e;
    if (!valueFromJson(j.elements()[i], element, e, error)) {
      // The index path leads the message: "[1][0] is ...".
      error = "[" + std::to_string(i) + "]" + (error[0] == '[' ? "" : " ") +
              error;
      return false;
    }
    out.list.push_back(std::move(e));
  }
  return true;
}

std::string mdl::rt::missingMessage(std::string_view configPath,
                                    const Value &missing) {
  std::string out = "'" + std::string(configPath) + "' has ";
  if (missing.triedKeys.size() == 1)
    return out + "no key '" + missing.triedKeys[0] + "'";
  out += "none of the keys ";
  for (size_t i = 0; i < missing.triedKeys.size(); ++i)
    out += (i ? ", '" : "'") + missing.triedKeys[i] + "'";
  return out;
}
