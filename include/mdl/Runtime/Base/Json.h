//===- Json.h - A small JSON reader and writer ------------------*- C++ -*-===//
//
// Plain C++17. Reads config.json and safetensors headers; remembers where
// each value was (byte offset) so that errors can point into the file, and
// keeps object keys in file order. Integers stay exact (int64); a number
// with a fraction or exponent is a double. Member lookup takes constant
// time (objects of more than a few members keep a hash index), so parsing
// is linear in the size of the text.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_BASE_JSON_H
#define MDL_RUNTIME_BASE_JSON_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mdl::json {

class Value {
public:
  enum Kind { Null, Bool, Int, Double, String, Array, Object };

  Value() = default;
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value array(std::vector<Value> elements = {});
  /// An array of strings.
  static Value strings(const std::vector<std::string> &elements);
  static Value object();

  Kind kind() const { return k; }
  bool isNull() const { return k == Null; }
  bool asBool() const { return b; }
  int64_t asInt() const { return i; }
  double asDouble() const { return k == Int ? double(i) : d; }
  const std::string &asString() const { return s; }
  const std::vector<Value> &elements() const { return arr; }
  std::vector<Value> &elements() { return arr; }
  const std::vector<std::pair<std::string, Value>> &members() const {
    return obj;
  }

  /// Object member lookup; null when absent or not an object.
  const Value *get(std::string_view key) const;
  Value *get(std::string_view key);
  /// Sets (or replaces) a member of an object.
  void set(std::string key, Value v);
  /// Removes a member of an object; whether it was there.
  bool erase(std::string_view key);
  void push(Value v) { arr.push_back(std::move(v)); }

  /// Byte offset of the value in the text it was parsed from.
  size_t offset = 0;

  static const char *kindName(Kind k);

private:
  Kind k = Null;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::vector<Value> arr;
  std::vector<std::pair<std::string, Value>> obj;
  /// Positions of the members of an object of more than kIndexFrom of
  /// them, by key; copied with the value.
  class KeyIndex {
  public:
    using Map = std::unordered_map<std::string, size_t>;
    KeyIndex() = default;
    KeyIndex(const KeyIndex &o) { *this = o; }
    KeyIndex(KeyIndex &&) = default;
    KeyIndex &operator=(const KeyIndex &o) {
      map = o.map ? std::make_unique<Map>(*o.map) : nullptr;
      return *this;
    }
    KeyIndex &operator=(KeyIndex &&) = default;
    std::unique_ptr<Map> map;
  };
  static constexpr size_t kIndexFrom = 16;
  KeyIndex index;
  void reindex();
};

struct ParseError {
  std::string message;
  size_t offset = 0;
  size_t line = 1, column = 1; // 1-based
};

/// Parses `text`. Limits nesting to `maxDepth` so that hostile input cannot
/// exhaust the stack. Rejects trailing text, duplicate keys, invalid UTF-8
/// and numbers that do not fit.
std::optional<Value> parse(std::string_view text, ParseError &error,
                           unsigned maxDepth = 256);

/// Line and column (1-based) of a byte offset in `text`.
std::pair<size_t, size_t> lineColumn(std::string_view text, size_t offset);

/// Writes `v` compactly (`indent` < 0) or pretty-printed.
std::string write(const Value &v, int indent = -1);
/// Quotes and escapes a string for JSON.
std::string quote(std::string_view s);

} // namespace mdl::json

#endif // MDL_RUNTIME_BASE_JSON_H
