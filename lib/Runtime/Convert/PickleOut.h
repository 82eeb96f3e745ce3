//===- PickleOut.h - Writing pickles (protocol 2) ---------------*- C++ -*-===//
//
// The few opcodes the writers of torch files need: the state dicts of a
// torch.save archive, a distributed checkpoint's `.metadata`.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_LIB_RUNTIME_CONVERT_PICKLEOUT_H
#define MDL_LIB_RUNTIME_CONVERT_PICKLEOUT_H

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt::detail {

class PickleOut {
public:
  std::string bytes = std::string("\x80\x02", 2);

  void op(char c) { bytes += c; }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      bytes += 'K';
      bytes += char(v);
    } else if (v >= 0 && v < 65536) {
      bytes += 'M';
      raw(uint64_t(v), 2);
    } else if (v >= std::numeric_limits<int32_t>::min() &&
               v <= std::numeric_limits<int32_t>::max()) {
      bytes += 'J';
      raw(uint64_t(uint32_t(int32_t(v))), 4);
    } else {
      bytes += '\x8a'; // LONG1: 8 bytes, two's complement
      bytes += char(8);
      raw(uint64_t(v), 8);
    }
  }
  void string(std::string_view s) {
    bytes += 'X';
    raw(s.size(), 4);
    bytes += s;
  }
  void global(std::string_view module, std::string_view name) {
    bytes += 'c';
    bytes += module;
    bytes += '\n';
    bytes += name;
    bytes += '\n';
  }
  void tuple(const std::vector<int64_t> &items) {
    if (items.empty()) {
      op(')');
      return;
    }
    if (items.size() > 3)
      op('(');
    for (int64_t v : items)
      integer(v);
    op(items.size() == 1   ? '\x85'
       : items.size() == 2 ? '\x86'
       : items.size() == 3 ? '\x87'
                           : 't');
  }
  void orderedDict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }
  void none() { op('N'); }
  void boolean(bool b) { op(b ? '\x88' : '\x89'); }
  /// An object of class module.name made without arguments (NEWOBJ); its
  /// state follows, then build().
  void newObject(std::string_view module, std::string_view name) {
    global(module, name);
    op(')');
    op('\x81');
  }
  void build() { op('b'); }

private:
  void raw(uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      bytes += char((v >> (8 * i)) & 0xff);
  }
};

} // namespace mdl::rt::detail

#endif // MDL_LIB_RUNTIME_CONVERT_PICKLEOUT_H
