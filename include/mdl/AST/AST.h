//===- AST.h - The MDL abstract syntax tree -------------------------------===//
//
// The parser (lib/Parse) builds these nodes from the ANTLR parse tree; Sema
// resolves and types them; MLIRGen lowers them to the `mdl` dialect. Every
// node carries the source range it was parsed from.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_AST_AST_H
#define MDL_AST_AST_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mdl::ast {

using llvm::SMLoc;
using llvm::SMRange;

/// A name as written, with where it was written.
struct Ident {
  std::string name;
  SMRange range;
  SMLoc loc() const { return range.Start; }
};

/// The base of each node hierarchy (expressions, members, layout entries,
/// declarations): the node's kind, for LLVM-style RTTI, and its source
/// range. `Kinds` holds the hierarchy's `enum Kind`, which the hierarchy's
/// classes inherit (`Expr::IntLit`).
template <typename Kinds> class Node : public Kinds {
public:
  using Kind = typename Kinds::Kind;
  Node(Kind kind, SMRange range) : kind(kind), range(range) {}
  virtual ~Node() = default;
  Kind getKind() const { return kind; }
  SMRange getRange() const { return range; }
  SMLoc getLoc() const { return range.Start; }

private:
  Kind kind;
  SMRange range;
};

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

/// The value types of the language. A `dim` is an integer that may also be
/// used as a named dimension in shapes.
struct Type {
  enum Kind { Invalid, Int, Bool, String, Dim, DType, List, Any };
  Kind kind = Invalid;
  std::shared_ptr<Type> element; // for List

  static Type get(Kind k) { return Type{k, nullptr}; }
  static Type listOf(Type elem) {
    return Type{List, std::make_shared<Type>(std::move(elem))};
  }
  bool isInt() const { return kind == Int || kind == Dim; }
  bool isValid() const { return kind != Invalid; }
  /// Two types are compatible when a value of one may stand for the other
  /// (`dim` and `int` are interchangeable as values).
  bool compatible(const Type &other) const;
  std::string str() const;
};

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

struct ExprKinds {
  enum Kind {
    IntLit,
    StringLit,
    BoolLit,
    NameRef,
    Call,
    Index,
    Unary,
    Binary,
    Is,
    Cond,
    ListLit,
    Comprehension,
  };
};
class Expr : public Node<ExprKinds> {
public:
  using Node::Node;

  /// Filled in by Sema.
  Type type;
};
using ExprPtr = std::unique_ptr<Expr>;

struct IntLitExpr : Expr {
  IntLitExpr(int64_t value, SMRange r) : Expr(IntLit, r), value(value) {}
  int64_t value;
  static bool classof(const Expr *e) { return e->getKind() == IntLit; }
};

struct StringLitExpr : Expr {
  StringLitExpr(std::string value, SMRange r)
      : Expr(StringLit, r), value(std::move(value)) {}
  std::string value;
  static bool classof(const Expr *e) { return e->getKind() == StringLit; }
};

struct BoolLitExpr : Expr {
  BoolLitExpr(bool value, SMRange r) : Expr(BoolLit, r), value(value) {}
  bool value;
  static bool classof(const Expr *e) { return e->getKind() == BoolLit; }
};

struct NameRefExpr : Expr {
  NameRefExpr(std::string name, SMRange r)
      : Expr(NameRef, r), name(std::move(name)) {}
  std::string name;
  /// What the name refers to, filled in by Sema: a member of the enclosing
  /// module, a local variable (stack index, comprehension or mount
  /// variable), a dtype constant, or a value of the parallel context
  /// (`tp`, `first_stage`, ...) that layouts and backends may read.
  enum RefKind { Unresolved, Member, Local, DTypeConst, Context };
  RefKind refKind = Unresolved;
  static bool classof(const Expr *e) { return e->getKind() == NameRef; }
};

struct CallExpr : Expr {
  CallExpr(Ident callee, std::vector<ExprPtr> args, SMRange r)
      : Expr(Call, r), callee(std::move(callee)), args(std::move(args)) {}
  Ident callee;
  std::vector<ExprPtr> args;
  static bool classof(const Expr *e) { return e->getKind() == Call; }
};

struct IndexExpr : Expr {
  IndexExpr(ExprPtr base, ExprPtr index, SMRange r)
      : Expr(Index, r), base(std::move(base)), index(std::move(index)) {}
  ExprPtr base, index;
  static bool classof(const Expr *e) { return e->getKind() == Index; }
};

enum class UnaryOp { Neg, Not };
struct UnaryExpr : Expr {
  UnaryExpr(UnaryOp op, ExprPtr operand, SMRange r)
      : Expr(Unary, r), op(op), operand(std::move(operand)) {}
  UnaryOp op;
  ExprPtr operand;
  static bool classof(const Expr *e) { return e->getKind() == Unary; }
};

enum class BinaryOp {
  Add,
  Sub,
  Mul,
  Div,
  Mod,
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  And,
  Or,
  In,
  Coalesce,
};
llvm::StringRef spelling(BinaryOp op);

struct BinaryExpr : Expr {
  BinaryExpr(BinaryOp op, ExprPtr lhs, ExprPtr rhs, SMRange r)
      : Expr(Binary, r), op(op), lhs(std::move(lhs)), rhs(std::move(rhs)) {}
  BinaryOp op;
  ExprPtr lhs, rhs;
  static bool classof(const Expr *e) { return e->getKind() == Binary; }
};

/// `attn is GatedAttention`: which module an instance resolved to.
struct IsExpr : Expr {
  IsExpr(ExprPtr operand, Ident module, SMRange r)
      : Expr(Is, r), operand(std::move(operand)), module(std::move(module)) {}
  ExprPtr operand;
  Ident module;
  static bool classof(const Expr *e) { return e->getKind() == Is; }
};

struct CondExpr : Expr {
  CondExpr(ExprPtr cond, ExprPtr thenExpr, ExprPtr elseExpr, SMRange r)
      : Expr(Cond, r), cond(std::move(cond)), thenExpr(std::move(thenExpr)),
        elseExpr(std::move(elseExpr)) {}
  ExprPtr cond, thenExpr, elseExpr;
  static bool classof(const Expr *e) { return e->getKind() == Cond; }
};

struct ListLitExpr : Expr {
  ListLitExpr(std::vector<ExprPtr> elements, SMRange r)
      : Expr(ListLit, r), elements(std::move(elements)) {}
  std::vector<ExprPtr> elements;
  static bool classof(const Expr *e) { return e->getKind() == ListLit; }
};

/// `[element for var in source]`
struct ComprehensionExpr : Expr {
  ComprehensionExpr(ExprPtr element, Ident var, ExprPtr source, SMRange r)
      : Expr(Comprehension, r), element(std::move(element)),
        var(std::move(var)), source(std::move(source)) {}
  ExprPtr element;
  Ident var;
  ExprPtr source;
  static bool classof(const Expr *e) { return e->getKind() == Comprehension; }
};

//===----------------------------------------------------------------------===//
// Module members
//===----------------------------------------------------------------------===//

/// One axis of a declared shape: a named dimension or a product of them.
using ShapeAxis = std::vector<Ident>;
using Shape = std::vector<ShapeAxis>;

struct ParallelStyle {
  enum Kind { Replicated, Column, Row, Vocab, Shard };
  Kind kind = Replicated;
  Ident dim; // empty for Replicated
  SMRange range;
};
llvm::StringRef spelling(ParallelStyle::Kind kind);

/// A module call `Name(args)`.
struct Argument {
  std::optional<Ident> name;
  ExprPtr value;
};
struct ModuleCall {
  Ident callee;
  std::vector<Argument> args;
  SMRange range;
};

/// What a member instantiates: one module, or one chosen by `match`.
struct InstanceExpr {
  struct Arm {
    ExprPtr pattern; // null for `_`
    SMRange patternRange;
    ModuleCall call;
  };
  ExprPtr scrutinee; // null for a direct instance
  std::vector<Arm> arms;
  SMRange range;
};

struct MemberKinds {
  enum Kind {
    Config,
    Example,
    Serves,
    Let,
    Require,
    DTypeDefault,
    Dim,
    Param,
    Linear,
    Instance,
    Stack,
    Pipeline,
    Needs,
    Deploy,
  };
};
class Member : public Node<MemberKinds> {
public:
  using Node::Node;
};
using MemberPtr = std::unique_ptr<Member>;

/// An entry of a `config { }` block: `name: type = expr;`.
struct ConfigMember : Member {
  ConfigMember(Ident name, Type type, ExprPtr value, SMRange r)
      : Member(Config, r), name(std::move(name)), type(std::move(type)),
        value(std::move(value)) {}
  Ident name;
  Type type;
  ExprPtr value;
  /// `config from "text_config", "" { }`: hf("k") looks for each root's
  /// `k` in turn.
  std::vector<std::string> roots;
  /// `detect [a, b]`: the candidates a checkpoint chooses among when the
  /// config holds none of the keys the entry reads; null without.
  ExprPtr detect;
  static bool classof(const Member *m) { return m->getKind() == Config; }
};

/// `example "configs/x.json";`: configs the main job instantiates.
struct ExampleMember : Member {
  ExampleMember(std::vector<std::pair<std::string, SMRange>> paths, SMRange r)
      : Member(Example, r), paths(std::move(paths)) {}
  std::vector<std::pair<std::string, SMRange>> paths;
  static bool classof(const Member *m) { return m->getKind() == Example; }
};

/// `deploy vllm tp=1,2,4,8;`: parallel configurations real deployments of
/// the model use on a backend, each axis with its values (a grid).
struct DeployMember : Member {
  struct Axis {
    Ident name;
    std::vector<int64_t> values;
  };
  DeployMember(Ident backend, std::vector<Axis> axes, SMRange r)
      : Member(Deploy, r), backend(std::move(backend)), axes(std::move(axes)) {}
  Ident backend;
  std::vector<Axis> axes;
  static bool classof(const Member *m) { return m->getKind() == Deploy; }
};

/// `serves model_type "qwen3";`: the config.json `architectures` or
/// `model_type` values a model serves.
struct ServesMember : Member {
  ServesMember(Ident key, std::vector<std::pair<std::string, SMRange>> values,
               SMRange r)
      : Member(Serves, r), key(std::move(key)), values(std::move(values)) {}
  Ident key;
  std::vector<std::pair<std::string, SMRange>> values;
  static bool classof(const Member *m) { return m->getKind() == Serves; }
};

struct LetMember : Member {
  LetMember(Ident name, std::optional<Type> type, ExprPtr value, SMRange r)
      : Member(Let, r), name(std::move(name)), declaredType(std::move(type)),
        value(std::move(value)) {}
  Ident name;
  std::optional<Type> declaredType;
  ExprPtr value;
  static bool classof(const Member *m) { return m->getKind() == Let; }
};

struct RequireMember : Member {
  RequireMember(ExprPtr cond, std::string message, SMRange r)
      : Member(Require, r), cond(std::move(cond)), message(std::move(message)) {
  }
  ExprPtr cond;
  std::string message;
  static bool classof(const Member *m) { return m->getKind() == Require; }
};

struct DTypeDefaultMember : Member {
  DTypeDefaultMember(ExprPtr value, SMRange r)
      : Member(DTypeDefault, r), value(std::move(value)) {}
  ExprPtr value;
  static bool classof(const Member *m) { return m->getKind() == DTypeDefault; }
};

/// `dim P = N / G;` or the factored `dim Hv = (Hk, R);`.
struct DimMember : Member {
  DimMember(Ident name, ExprPtr size, std::vector<Ident> factors, SMRange r)
      : Member(Dim, r), name(std::move(name)), size(std::move(size)),
        factors(std::move(factors)) {}
  Ident name;
  ExprPtr size;               // null when factored
  std::vector<Ident> factors; // empty unless factored
  static bool classof(const Member *m) { return m->getKind() == Dim; }
};

struct ParamMember : Member {
  ParamMember(SMRange r) : Member(Param, r) {}
  Ident name;
  std::optional<Ident> expertDim;
  Shape shape;
  std::optional<Ident> dtype;
  std::optional<ParallelStyle> style;
  ExprPtr cond;
  static bool classof(const Member *m) { return m->getKind() == Param; }
};

struct LinearMember : Member {
  LinearMember(SMRange r) : Member(Linear, r) {}
  Ident name;
  std::optional<Ident> expertDim;
  Shape in, out;
  std::optional<Ident> dtype;
  ParallelStyle style;
  bool hasBias = false;
  ExprPtr biasCond; // null: unconditional when hasBias
  SMRange biasRange;
  /// `scale(B)`: the weight is stored in blocks of B x B, each with a
  /// scale (FP8 block quantization); B == 0: unscaled. Null: unscaled.
  ExprPtr scaleBlock;
  /// `mxfp4` or `mxfp4(cond)`: the weight is MXFP4 (blocks of 32 E2M1
  /// values along the input, each with an E8M0 scale), where `mxfp4Cond`
  /// holds when given.
  bool mxfp4 = false;
  ExprPtr mxfp4Cond;
  SMRange mxfp4Range;
  ExprPtr cond;
  static bool classof(const Member *m) { return m->getKind() == Linear; }
};

struct InstanceMember : Member {
  InstanceMember(Ident name, InstanceExpr expr, ExprPtr cond, SMRange r)
      : Member(Instance, r), name(std::move(name)), expr(std::move(expr)),
        cond(std::move(cond)) {}
  Ident name;
  InstanceExpr expr;
  ExprPtr cond;
  static bool classof(const Member *m) { return m->getKind() == Instance; }
};

/// `stack layers[L] as i: Layer(i);`
struct StackMember : Member {
  StackMember(Ident name, ExprPtr count, Ident indexVar, InstanceExpr expr,
              SMRange r)
      : Member(Stack, r), name(std::move(name)), count(std::move(count)),
        indexVar(std::move(indexVar)), expr(std::move(expr)) {}
  Ident name;
  ExprPtr count;
  Ident indexVar;
  InstanceExpr expr;
  static bool classof(const Member *m) { return m->getKind() == Stack; }
};

struct PipelineMember : Member {
  PipelineMember(SMRange r) : Member(Pipeline, r) {}
  std::vector<Ident> first, last;
  std::optional<Ident> staged;
  /// `last head ?? embed`: (head, embed).
  std::vector<std::pair<Ident, Ident>> lastFallbacks;
  static bool classof(const Member *m) { return m->getKind() == Pipeline; }
};

/// `needs uva fallback "...";`
struct NeedsMember : Member {
  NeedsMember(Ident capability, std::optional<std::string> fallback, SMRange r)
      : Member(Needs, r), capability(std::move(capability)),
        fallback(std::move(fallback)) {}
  Ident capability;
  std::optional<std::string> fallback;
  static bool classof(const Member *m) { return m->getKind() == Needs; }
};

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

/// A dotted reference to a parameter, e.g. `q` or `experts.gate`.
struct QualifiedName {
  std::vector<Ident> parts;
  SMRange range;
  std::string str() const;
};

/// One term of a layout axis: a named dimension, a unit axis `1`, a part
/// set `{q: (P, D), k: D}`, or a parenthesised product.
struct AxisTerm;
using AxisProduct = std::vector<AxisTerm>;
struct LayoutPart {
  QualifiedName param; // empty for a group
  AxisProduct shape;   // empty: the part adds no dimensions of its own
  SMRange range;
  bool isGroup() const { return param.parts.empty(); }
};
struct AxisTerm {
  enum Kind { Dim, Unit, Parts, Product };
  Kind kind = Dim;
  Ident dim;                      // Dim
  std::vector<LayoutPart> parts;  // Parts
  AxisProduct product;            // Product
  SMRange range;
};

struct TensorExpr {
  std::optional<QualifiedName> param;
  std::vector<AxisProduct> axes;
  SMRange range;
};

struct TensorOption {
  enum Kind { Copy, Zero, Offset, NegExp, DType, View, Split, On };
  Kind kind;
  ExprPtr value;                // Offset; Copy's condition, if any
  Ident name;                   // DType, Split's mesh axis, On's stage
  std::vector<ExprPtr> shape;   // View
  int64_t axis = 0;             // Split
  SMRange range;
};

struct LayoutEntryKinds {
  enum Kind { Tensor, Mount, Shard, Derived, Buffer, Let, ChoiceDefault };
};
class LayoutEntry : public Node<LayoutEntryKinds> {
public:
  using Node::Node;
};
using LayoutEntryPtr = std::unique_ptr<LayoutEntry>;

/// A name template: literal text with `{expr}` placeholders.
struct NameTemplate {
  struct Segment {
    std::string text; // literal text, when expr is null
    ExprPtr expr;
    /// Set by Sema when the placeholder is a bare dimension name, `{E}`:
    /// the entry then stands for one tensor per index of that dimension.
    bool family = false;
  };
  std::vector<Segment> segments;
  std::string spelling; // as written, without quotes
  SMRange range;
};

struct TensorEntry : LayoutEntry {
  TensorEntry(SMRange r) : LayoutEntry(Tensor, r) {}
  NameTemplate name;
  /// `"..." for layers[k] = ...`: one entry per element of a stack.
  std::optional<Ident> forStack, forVar;
  TensorExpr tensor;
  std::vector<TensorOption> options;
  ExprPtr when;
  /// `derived "..." = ...;`: a cache the backend computes from the
  /// parameter slices it holds, rebuilt after the `recompute` events; no
  /// checkpoint holds it.
  bool derived = false;
  bool hasRecompute = false;
  std::vector<Ident> recompute;
  static bool classof(const LayoutEntry *e) { return e->getKind() == Tensor; }
};

/// `attn at "self_attn";` or `layers[i] at "model.layers.{i}";`
struct MountEntry : LayoutEntry {
  MountEntry(SMRange r) : LayoutEntry(Mount, r) {}
  Ident member;
  std::optional<Ident> indexVar;
  NameTemplate path;
  ExprPtr when;
  static bool classof(const LayoutEntry *e) { return e->getKind() == Mount; }
};

/// `shard q, gate on N by tp replicate;`: overrides the module's parallel
/// style of these parameters for this backend; with `when`, only in the
/// parallel configurations (sizes) where the condition holds.
struct ShardEntry : LayoutEntry {
  ShardEntry(SMRange r) : LayoutEntry(Shard, r) {}
  std::vector<QualifiedName> params;
  Ident dim;
  std::optional<Ident> axis;
  bool replicate = false;
  ExprPtr when;
  static bool classof(const LayoutEntry *e) { return e->getKind() == Shard; }
};

/// `derived "conv1d_t" from conv1d recompute update;`: a derived tensor the
/// spec names the sources of but cannot compute (one it can is a
/// TensorEntry with `derived`).
struct DerivedEntry : LayoutEntry {
  DerivedEntry(SMRange r) : LayoutEntry(Derived, r) {}
  std::string name;
  SMRange nameRange;
  std::vector<QualifiedName> sources;
  std::vector<Ident> recompute;
  bool hasRecompute = false;
  ExprPtr when;
  static bool classof(const LayoutEntry *e) { return e->getKind() == Derived; }
};

/// `buffer "rotary_emb.inv_freq";`: a tensor checkpoints of the backend may
/// hold that is no parameter (a persistent buffer the framework recomputes).
struct BufferEntry : LayoutEntry {
  BufferEntry(SMRange r) : LayoutEntry(Buffer, r) {}
  std::string name;
  SMRange nameRange;
  ExprPtr when;
  static bool classof(const LayoutEntry *e) { return e->getKind() == Buffer; }
};

struct LayoutLetEntry : LayoutEntry {
  LayoutLetEntry(std::unique_ptr<LetMember> let, SMRange r)
      : LayoutEntry(Let, r), let(std::move(let)) {}
  std::unique_ptr<LetMember> let;
  static bool classof(const LayoutEntry *e) { return e->getKind() == Let; }
};

/// `choice expert_storage = E > 0 ? "packed" : "per_expert";` in a layout
/// of a model: the default of a backend's choice for that model, an
/// expression over its config.
struct ChoiceDefaultEntry : LayoutEntry {
  ChoiceDefaultEntry(Ident name, ExprPtr value, SMRange r)
      : LayoutEntry(ChoiceDefault, r), name(std::move(name)),
        value(std::move(value)) {}
  Ident name;
  ExprPtr value;
  static bool classof(const LayoutEntry *e) {
    return e->getKind() == ChoiceDefault;
  }
};

//===----------------------------------------------------------------------===//
// Top-level declarations
//===----------------------------------------------------------------------===//

struct DeclKinds {
  enum Kind { Module, Layout, Backend };
};
class Decl : public Node<DeclKinds> {
public:
  Decl(Kind kind, Ident name, SMRange range)
      : Node(kind, range), name(std::move(name)) {}
  Ident name;
};
using DeclPtr = std::unique_ptr<Decl>;

struct ModuleParam {
  Ident name;
  Type type;
  ExprPtr defaultValue;
  SMRange range;
};

/// A module, or a model (a root module with a config). A model may extend
/// another: `model b extends a { example "..."; }` is `a` under another name
/// with its own example configs, sharing a's members and layouts.
struct ModuleDecl : Decl {
  ModuleDecl(Ident name, bool isModel, SMRange r)
      : Decl(Module, std::move(name), r), isModel(isModel) {}
  bool isModel;
  std::optional<Ident> base;
  std::vector<ModuleParam> params;
  std::vector<MemberPtr> members;
  static bool classof(const Decl *d) { return d->getKind() == Module; }
};

struct LayoutDecl : Decl {
  LayoutDecl(Ident backend, Ident module, SMRange r)
      : Decl(Layout, backend, r), backend(std::move(backend)),
        module(std::move(module)) {}
  Ident backend;
  Ident module;
  std::optional<NameTemplate> mount;
  std::vector<LayoutEntryPtr> entries;
  static bool classof(const Decl *d) { return d->getKind() == Layout; }
};

struct BackendEntry {
  enum Kind { Mesh, Class, Capability, Choice, Let, Require };
  Kind kind;
  std::vector<Ident> names;                  // Mesh axes
  Ident name;                                // Class role, Capability, Choice
  std::string className;                     // Class
  std::vector<std::pair<std::string, SMRange>> options; // Choice
  std::vector<std::pair<Ident, ExprPtr>> properties; // Class
  ExprPtr value;                             // Capability
  std::unique_ptr<LetMember> let;
  std::unique_ptr<RequireMember> require;
  SMRange range;
};

struct BackendDecl : Decl {
  BackendDecl(Ident name, SMRange r) : Decl(Backend, std::move(name), r) {}
  std::optional<Ident> base;
  std::vector<BackendEntry> entries;
  static bool classof(const Decl *d) { return d->getKind() == Backend; }
};

struct Import {
  std::string path;
  SMRange range;
};

/// One parsed `.mdl` file.
struct File {
  std::string path;
  unsigned bufferId = 0;
  std::vector<Import> imports;
  std::vector<DeclPtr> decls;
};

} // namespace mdl::ast

#endif // MDL_AST_AST_H
