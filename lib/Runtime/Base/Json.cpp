//===- Json.cpp - A small JSON reader and writer --------------------------===//

#include "mdl/Runtime/Base/Json.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

using namespace mdl::json;

Value Value::boolean(bool b) {
  Value v;
  v.k = Bool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.k = Int;
  v.i = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.k = Double;
  v.d = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.k = String;
  v.s = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> elements) {
  Value v;
  v.k = Array;
  v.arr = std::move(elements);
  return v;
}
Value Value::object() {
  Value v;
  v.k = Object;
  return v;
}

const Value *Value::get(std::string_view key) const {
  if (k != Object)
    return nullptr;
  if (index.map) {
    auto it = index.map->find(std::string(key));
    return it == index.map->end() ? nullptr : &obj[it->second].second;
  }
  for (const auto &[name, value] : obj)
    if (name == key)
      return &value;
  return nullptr;
}

Value *Value::get(std::string_view key) {
  return const_cast<Value *>(static_cast<const Value *>(this)->get(key));
}

void Value::set(std::string key, Value v) {
  if (Value *existing = get(key)) {
    *existing = std::move(v);
    return;
  }
  obj.emplace_back(std::move(key), std::move(v));
  if (index.map)
    index.map->emplace(obj.back().first, obj.size() - 1);
  else if (obj.size() > kIndexFrom)
    reindex();
}

void Value::reindex() {
  index.map.reset();
  if (obj.size() <= kIndexFrom)
    return;
  index.map = std::make_unique<KeyIndex::Map>();
  index.map->reserve(obj.size());
  for (size_t n = 0; n < obj.size(); ++n)
    index.map->emplace(obj[n].first, n);
}

Value Value::strings(const std::vector<std::string> &elements) {
  Value v = array();
  for (const std::string &e : elements)
    v.push(string(e));
  return v;
}

bool Value::erase(std::string_view key) {
  auto it = std::find_if(obj.begin(), obj.end(),
                         [&](const auto &m) { return m.first == key; });
  if (it == obj.end())
    return false;
  obj.erase(it);
  reindex();
  return true;
}

const char *Value::kindName(Kind k) {
  switch (k) {
  case Null: return "null";
  case Bool: return "a boolean";
  case Int: return "an integer";
  case Double: return "a number with a fraction";
  case String: return "a string";
  case Array: return "an array";
  case Object: return "an object";
  }
  return "a value";
}

std::pair<size_t, size_t> mdl::json::lineColumn(std::string_view text,
                                                size_t offset) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return {line, col};
}

namespace {

class Parser {
public:
  Parser(std::string_view text, ParseError &error, unsigned maxDepth)
      : text(text), error(error), maxDepth(maxDepth) {}

  std::optional<Value> run() {
    skipSpace();
    std::optional<Value> v = value(0);
    if (!v)
      return std::nullopt;
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the JSON value");
    return v;
  }

private:
  std::nullopt_t fail(const std::string &message) {
    error.message = message;
    error.offset = pos;
    auto [line, col] = lineColumn(text, pos);
    error.line = line;
    error.column = col;
    return std::nullopt;
  }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool literal(std::string_view word) {
    if (text.substr(pos, word.size()) != word)
      return false;
    pos += word.size();
    return true;
  }

  std::optional<Value> value(unsigned depth) {
    if (depth > maxDepth)
      return fail("JSON nested more than " + std::to_string(maxDepth) +
                  " deep");
    if (pos >= text.size())
      return fail("unexpected end of JSON");
    size_t start = pos;
    std::optional<Value> v;
    char c = text[pos];
    if (c == '{')
      v = object(depth);
    else if (c == '[')
      v = array(depth);
    else if (c == '"') {
      std::optional<std::string> s = string();
      if (s)
        v = Value::string(std::move(*s));
    } else if (c == '-' || (c >= '0' && c <= '9'))
      v = number();
    else if (literal("true"))
      v = Value::boolean(true);
    else if (literal("false"))
      v = Value::boolean(false);
    else if (literal("null"))
      v = Value::null();
    else if (literal("NaN") || literal("Infinity"))
      return fail("NaN and Infinity are not JSON");
    else
      return fail(std::string("unexpected character '") + c + "'");
    if (v)
      v->offset = start;
    return v;
  }

  std::optional<Value> object(unsigned depth) {
    Value obj = Value::object();
    ++pos; // {
    skipSpace();
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      return obj;
    }
    while (true) {
      skipSpace();
      if (pos >= text.size() || text[pos] != '"')
        return fail("expected a string key");
      size_t keyPos = pos;
      std::optional<std::string> key = string();
      if (!key)
        return std::nullopt;
      if (obj.get(*key)) {
        pos = keyPos;
        return fail("duplicate key \"" + *key + "\"");
      }
      skipSpace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':' after a key");
      ++pos;
      skipSpace();
      std::optional<Value> v = value(depth + 1);
      if (!v)
        return std::nullopt;
      obj.set(std::move(*key), std::move(*v));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return obj;
      }
      return fail("expected ',' or '}' in an object");
    }
  }

  std::optional<Value> array(unsigned depth) {
    Value arr = Value::array();
    ++pos; // [
    skipSpace();
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      return arr;
    }
    while (true) {
      skipSpace();
      std::optional<Value> v = value(depth + 1);
      if (!v)
        return std::nullopt;
      arr.push(std::move(*v));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return arr;
      }
      return fail("expected ',' or ']' in an array");
    }
  }

  static void appendUtf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::optional<uint32_t> hex4() {
    if (pos + 4 > text.size())
      return std::nullopt;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        return std::nullopt;
    }
    return v;
  }

  /// Length of the UTF-8 sequence at `pos`, or 0 if invalid.
  size_t utf8Length() const {
    auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    unsigned char c = byte(pos);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3
                            : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos + len > text.size())
      return 0;
    for (size_t i = 1; i < len; ++i)
      if ((byte(pos + i) & 0xC0) != 0x80)
        return 0;
    // Reject overlong forms and surrogates.
    if (len == 2 && c < 0xC2)
      return 0;
    if (len == 3) {
      uint32_t cp = ((c & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) |
                    (byte(pos + 2) & 0x3F);
      if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    }
    if (len == 4) {
      uint32_t cp = ((c & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) |
                    ((byte(pos + 2) & 0x3F) << 6) | (byte(pos + 3) & 0x3F);
      if (cp < 0x10000 || cp > 0x10FFFF)
        return 0;
    }
    return len;
  }

  std::optional<std::string> string() {
    ++pos; // "
    std::string out;
    while (true) {
      if (pos >= text.size())
        return fail("unterminated string");
      unsigned char c = text[pos];
      if (c == '"') {
        ++pos;
        return out;
      }
      if (c < 0x20)
        return fail("control character in a string");
      if (c == '\\') {
        ++pos;
        if (pos >= text.size())
          return fail("unterminated string");
        char e = text[pos++];
        switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::optional<uint32_t> cp = hex4();
          if (!cp)
            return fail("bad \\u escape");
          if (*cp >= 0xD800 && *cp <= 0xDBFF) {
            if (!literal("\\u"))
              return fail("unpaired surrogate in \\u escape");
            std::optional<uint32_t> lo = hex4();
            if (!lo || *lo < 0xDC00 || *lo > 0xDFFF)
              return fail("unpaired surrogate in \\u escape");
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*lo - 0xDC00);
          } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
            return fail("unpaired surrogate in \\u escape");
          }
          appendUtf8(out, *cp);
          break;
        }
        default:
          --pos;
          return fail(std::string("unknown escape '\\") + e + "'");
        }
        continue;
      }
      size_t len = utf8Length();
      if (!len)
        return fail("invalid UTF-8 in a string");
      out.append(text.substr(pos, len));
      pos += len;
    }
  }

  std::optional<Value> number() {
    size_t start = pos;
    if (text[pos] == '-')
      ++pos;
    if (pos >= text.size() || !(text[pos] >= '0' && text[pos] <= '9'))
      return fail("malformed number");
    if (text[pos] == '0' && pos + 1 < text.size() && text[pos + 1] >= '0' &&
        text[pos + 1] <= '9')
      return fail("numbers have no leading zeros");
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
      ++pos;
    bool isFloat = false;
    if (pos < text.size() && text[pos] == '.') {
      isFloat = true;
      ++pos;
      if (pos >= text.size() || !(text[pos] >= '0' && text[pos] <= '9'))
        return fail("malformed number");
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
    }
    if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
      isFloat = true;
      ++pos;
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-'))
        ++pos;
      if (pos >= text.size() || !(text[pos] >= '0' && text[pos] <= '9'))
        return fail("malformed number");
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
    }
    std::string token(text.substr(start, pos - start));
    if (isFloat) {
      double d = std::strtod(token.c_str(), nullptr);
      if (!std::isfinite(d)) {
        pos = start;
        return fail("number out of range");
      }
      return Value::number(d);
    }
    // Exact int64, or an error: sizes must not be silently rounded.
    bool negative = token[0] == '-';
    uint64_t magnitude = 0;
    for (size_t i = negative ? 1 : 0; i < token.size(); ++i) {
      uint64_t digit = token[i] - '0';
      if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        pos = start;
        return fail("integer " + token + " does not fit in 64 bits");
      }
      magnitude = magnitude * 10 + digit;
    }
    uint64_t limit = negative ? uint64_t(1) << 63
                              : uint64_t(std::numeric_limits<int64_t>::max());
    if (magnitude > limit) {
      pos = start;
      return fail("integer " + token + " does not fit in 64 bits");
    }
    int64_t value = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
    return Value::integer(value);
  }

  std::string_view text;
  ParseError &error;
  unsigned maxDepth;
  size_t pos = 0;
};

void writeValue(const Value &v, int indent, int depth, std::string &out) {
  auto newline = [&](int d) {
    if (indent < 0)
      return;
    out += '\n';
    out.append(size_t(indent * d), ' ');
  };
  switch (v.kind()) {
  case Value::Null:
    out += "null";
    return;
  case Value::Bool:
    out += v.asBool() ? "true" : "false";
    return;
  case Value::Int:
    out += std::to_string(v.asInt());
    return;
  case Value::Double: {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v.asDouble());
    out += buf;
    return;
  }
  case Value::String:
    out += quote(v.asString());
    return;
  case Value::Array: {
    out += '[';
    bool first = true;
    for (const Value &e : v.elements()) {
      if (!first)
        out += indent < 0 ? "," : ",";
      first = false;
      newline(depth + 1);
      writeValue(e, indent, depth + 1, out);
    }
    if (!v.elements().empty())
      newline(depth);
    out += ']';
    return;
  }
  case Value::Object: {
    out += '{';
    bool first = true;
    for (const auto &[key, value] : v.members()) {
      if (!first)
        out += ',';
      first = false;
      newline(depth + 1);
      out += quote(key);
      out += indent < 0 ? ":" : ": ";
      writeValue(value, indent, depth + 1, out);
    }
    if (!v.members().empty())
      newline(depth);
    out += '}';
    return;
  }
  }
}

} // namespace

std::optional<Value> mdl::json::parse(std::string_view text, ParseError &error,
                                      unsigned maxDepth) {
  return Parser(text, error, maxDepth).run();
}

std::string mdl::json::quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += char(c);
      }
    }
  }
  out += '"';
  return out;
}

std::string mdl::json::write(const Value &v, int indent) {
  std::string out;
  writeValue(v, indent, 0, out);
  return out;
}
