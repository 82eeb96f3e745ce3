//===- ASTDumper.cpp - Print the MDL AST ----------------------------------===//
//
// One node per line, indented by depth, each with the line:col it came from.
// Expressions print on one line, fully parenthesised, so that a test can see
// how they were grouped.
//
//===----------------------------------------------------------------------===//

#include "mdl/AST/ASTDumper.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl::ast;
using llvm::cast;
using llvm::dyn_cast;

namespace {

class Dumper {
public:
  Dumper(llvm::SourceMgr &sm, llvm::raw_ostream &os) : sm(sm), os(os) {}

  void file(const File &f);

private:
  void line(SMLoc loc) {
    os.indent(indent * 2);
    pendingLoc = loc;
  }
  void end() {
    if (pendingLoc.isValid()) {
      auto [l, c] = sm.getLineAndColumn(pendingLoc);
      os << " @" << l << ":" << c;
    }
    os << "\n";
  }
  struct Nest {
    Nest(unsigned &i) : i(i) { ++i; }
    ~Nest() { --i; }
    unsigned &i;
  };

  void expr(const Expr *e);
  /// `e` between `open` and `close`.
  void wrapped(const char *open, const Expr *e, const char *close) {
    os << open;
    expr(e);
    os << close;
  }
  /// `lead` and `e`, where there is an `e`.
  void optional(const char *lead, const Expr *e) {
    if (!e)
      return;
    os << lead;
    expr(e);
  }
  /// `items` separated by ", ", each printed by `each`.
  template <typename Range, typename Fn>
  void list(const Range &items, Fn each) {
    llvm::interleaveComma(items, os, each);
  }
  /// The same after `lead`, where there are any items.
  template <typename Range, typename Fn>
  void list(const char *lead, const Range &items, Fn each) {
    if (!items.empty())
      os << lead;
    list(items, each);
  }
  void exprs(const std::vector<ExprPtr> &es) {
    list(es, [&](const ExprPtr &e) { expr(e.get()); });
  }
  void names(const std::vector<Ident> &ids, const char *lead = "") {
    list(lead, ids, [&](const Ident &id) { os << id.name; });
  }
  void qualifiedNames(const std::vector<QualifiedName> &qs) {
    list(" ", qs, [&](const QualifiedName &q) { os << q.str(); });
  }
  /// The strings of (string, range) pairs, each quoted after a space.
  void quoted(const std::vector<std::pair<std::string, SMRange>> &items) {
    for (const auto &item : items)
      os << " \"" << item.first << "\"";
  }
  void terms(const AxisProduct &p) {
    list(p, [&](const AxisTerm &t) { term(t); });
  }
  void shape(const Shape &s);
  /// ` column(D)`, ` replicated`, ...
  void style(const ParallelStyle &s) {
    os << " " << spelling(s.kind);
    if (s.kind != ParallelStyle::Replicated)
      os << "(" << s.dim.name << ")";
  }
  void term(const AxisTerm &t);
  void product(const AxisProduct &p);
  void tmpl(const NameTemplate &t);
  void call(const ModuleCall &c);
  void instance(const InstanceExpr &ie);
  void member(const Member *m);
  void decl(const Decl *d);

  llvm::SourceMgr &sm;
  llvm::raw_ostream &os;
  unsigned indent = 0;
  SMLoc pendingLoc;
};

void Dumper::expr(const Expr *e) {
  if (!e) {
    os << "<none>";
    return;
  }
  switch (e->getKind()) {
  case Expr::IntLit:
    os << cast<IntLitExpr>(e)->value;
    return;
  case Expr::StringLit:
    os << '"';
    os.write_escaped(cast<StringLitExpr>(e)->value);
    os << '"';
    return;
  case Expr::BoolLit:
    os << (cast<BoolLitExpr>(e)->value ? "true" : "false");
    return;
  case Expr::NameRef:
    os << cast<NameRefExpr>(e)->name;
    return;
  case Expr::Call: {
    auto *c = cast<CallExpr>(e);
    os << c->callee.name << "(";
    exprs(c->args);
    os << ")";
    return;
  }
  case Expr::Index: {
    auto *x = cast<IndexExpr>(e);
    expr(x->base.get());
    wrapped("[", x->index.get(), "]");
    return;
  }
  case Expr::Unary: {
    auto *x = cast<UnaryExpr>(e);
    wrapped(x->op == UnaryOp::Neg ? "(-" : "(!", x->operand.get(), ")");
    return;
  }
  case Expr::Binary: {
    auto *x = cast<BinaryExpr>(e);
    os << "(";
    expr(x->lhs.get());
    os << " " << spelling(x->op) << " ";
    expr(x->rhs.get());
    os << ")";
    return;
  }
  case Expr::Is: {
    auto *x = cast<IsExpr>(e);
    os << "(";
    expr(x->operand.get());
    os << " is " << x->module.name << ")";
    return;
  }
  case Expr::Cond: {
    auto *x = cast<CondExpr>(e);
    os << "(";
    expr(x->cond.get());
    os << " ? ";
    expr(x->thenExpr.get());
    os << " : ";
    expr(x->elseExpr.get());
    os << ")";
    return;
  }
  case Expr::ListLit: {
    os << "[";
    exprs(cast<ListLitExpr>(e)->elements);
    os << "]";
    return;
  }
  case Expr::Comprehension: {
    auto *x = cast<ComprehensionExpr>(e);
    os << "[";
    expr(x->element.get());
    os << " for " << x->var.name << " in ";
    expr(x->source.get());
    os << "]";
    return;
  }
  }
}

void Dumper::shape(const Shape &s) {
  os << "[";
  list(s, [&](const ShapeAxis &axis) {
    if (axis.size() > 1)
      os << "(";
    names(axis);
    if (axis.size() > 1)
      os << ")";
  });
  os << "]";
}

void Dumper::product(const AxisProduct &p) {
  if (p.size() == 1) {
    term(p[0]);
    return;
  }
  os << "(";
  terms(p);
  os << ")";
}

void Dumper::term(const AxisTerm &t) {
  switch (t.kind) {
  case AxisTerm::Dim:
    os << t.dim.name;
    return;
  case AxisTerm::Unit:
    os << "1";
    return;
  case AxisTerm::Product:
    product(t.product);
    return;
  case AxisTerm::Parts:
    os << "{";
    list(t.parts, [&](const LayoutPart &part) {
      if (part.isGroup()) {
        os << "(";
        terms(part.shape);
        os << ")";
        return;
      }
      os << part.param.str();
      if (!part.shape.empty()) {
        os << ": ";
        product(part.shape);
      }
    });
    os << "}";
    return;
  }
}

void Dumper::tmpl(const NameTemplate &t) {
  os << '"';
  for (const auto &seg : t.segments) {
    if (!seg.expr) {
      os.write_escaped(seg.text);
      continue;
    }
    wrapped("{", seg.expr.get(), "}");
  }
  os << '"';
}

void Dumper::call(const ModuleCall &c) {
  os << c.callee.name << "(";
  list(c.args, [&](const Argument &a) {
    if (a.name)
      os << a.name->name << " = ";
    expr(a.value.get());
  });
  os << ")";
}

void Dumper::instance(const InstanceExpr &ie) {
  if (!ie.scrutinee) {
    call(ie.arms.front().call);
    return;
  }
  os << "match ";
  expr(ie.scrutinee.get());
  os << " {";
  for (size_t i = 0; i < ie.arms.size(); ++i) {
    os << (i ? ", " : " ");
    if (ie.arms[i].pattern)
      expr(ie.arms[i].pattern.get());
    else
      os << "_";
    os << " => ";
    call(ie.arms[i].call);
  }
  os << " }";
}

void Dumper::member(const Member *m) {
  line(m->getLoc());
  switch (m->getKind()) {
  case Member::Config: {
    auto *x = cast<ConfigMember>(m);
    os << "Config " << x->name.name << ": " << x->type.str() << " = ";
    expr(x->value.get());
    if (!x->roots.empty()) {
      os << " from";
      list(" ", x->roots, [&](const std::string &r) { os << '"' << r << '"'; });
    }
    optional(" detect ", x->detect.get());
    break;
  }
  case Member::Deploy: {
    auto *x = cast<DeployMember>(m);
    os << "Deploy " << x->backend.name;
    for (auto &a : x->axes) {
      os << " " << a.name.name << "=";
      llvm::interleave(a.values, os, ",");
    }
    break;
  }
  case Member::Example:
    os << "Example";
    quoted(cast<ExampleMember>(m)->paths);
    break;
  case Member::Serves: {
    auto *x = cast<ServesMember>(m);
    os << "Serves " << x->key.name;
    quoted(x->values);
    break;
  }
  case Member::Let: {
    auto *x = cast<LetMember>(m);
    os << "Let " << x->name.name;
    if (x->declaredType)
      os << ": " << x->declaredType->str();
    os << " = ";
    expr(x->value.get());
    break;
  }
  case Member::Require: {
    auto *x = cast<RequireMember>(m);
    os << "Require ";
    expr(x->cond.get());
    os << " \"";
    os.write_escaped(x->message);
    os << "\"";
    break;
  }
  case Member::DTypeDefault:
    os << "DType ";
    expr(cast<DTypeDefaultMember>(m)->value.get());
    break;
  case Member::Dim: {
    auto *x = cast<DimMember>(m);
    os << "Dim " << x->name.name << " = ";
    if (x->size) {
      expr(x->size.get());
    } else {
      os << "(";
      names(x->factors);
      os << ")";
    }
    break;
  }
  case Member::Param: {
    auto *x = cast<ParamMember>(m);
    os << "Param " << x->name.name;
    if (x->expertDim)
      os << "[" << x->expertDim->name << "]";
    os << " ";
    shape(x->shape);
    if (x->dtype)
      os << " " << x->dtype->name;
    if (x->style)
      style(*x->style);
    optional(" if ", x->cond.get());
    break;
  }
  case Member::Linear: {
    auto *x = cast<LinearMember>(m);
    os << "Linear " << x->name.name;
    if (x->expertDim)
      os << "[" << x->expertDim->name << "]";
    os << " ";
    shape(x->in);
    os << " -> ";
    shape(x->out);
    if (x->dtype)
      os << " " << x->dtype->name;
    style(x->style);
    if (x->hasBias) {
      os << " bias";
      if (x->biasCond)
        wrapped("(", x->biasCond.get(), ")");
    }
    if (x->scaleBlock)
      wrapped(" scale(", x->scaleBlock.get(), ")");
    if (x->mxfp4) {
      os << " mxfp4";
      if (x->mxfp4Cond)
        wrapped("(", x->mxfp4Cond.get(), ")");
    }
    optional(" if ", x->cond.get());
    break;
  }
  case Member::Instance: {
    auto *x = cast<InstanceMember>(m);
    os << "Instance " << x->name.name << " = ";
    instance(x->expr);
    optional(" if ", x->cond.get());
    break;
  }
  case Member::Stack: {
    auto *x = cast<StackMember>(m);
    os << "Stack " << x->name.name << "[";
    expr(x->count.get());
    os << "] as " << x->indexVar.name << " = ";
    instance(x->expr);
    break;
  }
  case Member::Pipeline: {
    auto *x = cast<PipelineMember>(m);
    os << "Pipeline first(";
    names(x->first);
    os << ") stages(" << (x->staged ? x->staged->name : "") << ") last(";
    list(x->last, [&](const Ident &n) {
      os << n.name;
      for (auto &[wanted, fallback] : x->lastFallbacks)
        if (wanted.name == n.name)
          os << " ?? " << fallback.name;
    });
    os << ")";
    break;
  }
  case Member::Needs: {
    auto *x = cast<NeedsMember>(m);
    os << "Needs " << x->capability.name;
    if (x->fallback)
      os << " fallback \"" << *x->fallback << "\"";
    break;
  }
  }
  end();
}

void Dumper::decl(const Decl *d) {
  line(d->getLoc());
  if (auto *m = dyn_cast<ModuleDecl>(d)) {
    os << (m->isModel ? "Model " : "Module ") << m->name.name;
    if (m->base)
      os << " extends " << m->base->name;
    end();
    Nest n(indent);
    for (const ModuleParam &p : m->params) {
      line(p.range.Start);
      os << "Input " << p.name.name << ": " << p.type.str();
      optional(" = ", p.defaultValue.get());
      end();
    }
    for (const MemberPtr &mem : m->members)
      member(mem.get());
    return;
  }
  if (auto *l = dyn_cast<LayoutDecl>(d)) {
    os << "Layout " << l->backend.name << " of " << l->module.name;
    if (l->mount) {
      os << " at ";
      tmpl(*l->mount);
    }
    end();
    Nest n(indent);
    for (const LayoutEntryPtr &e : l->entries) {
      line(e->getLoc());
      if (auto *t = dyn_cast<TensorEntry>(e.get())) {
        os << (t->derived ? "DerivedTensor " : "Tensor ");
        tmpl(t->name);
        if (t->forStack)
          os << " for " << t->forStack->name << "[" << t->forVar->name << "]";
        os << " = ";
        if (t->tensor.param)
          os << t->tensor.param->str();
        os << "[";
        list(t->tensor.axes, [&](const AxisProduct &p) { product(p); });
        os << "]";
        for (const TensorOption &o : t->options) {
          switch (o.kind) {
          case TensorOption::Copy:
            os << " copy";
            if (o.value)
              wrapped("(", o.value.get(), ")");
            break;
          case TensorOption::Zero:
            os << " zero";
            break;
          case TensorOption::Offset:
            wrapped(" offset(", o.value.get(), ")");
            break;
          case TensorOption::NegExp:
            os << " neg_exp";
            break;
          case TensorOption::DType:
            os << " as " << o.name.name;
            break;
          case TensorOption::View:
            os << " view[";
            exprs(o.shape);
            os << "]";
            break;
          case TensorOption::Split:
            os << " split " << o.axis;
            if (!o.name.name.empty())
              os << " by " << o.name.name;
            break;
          case TensorOption::On:
            os << " on " << o.name.name;
            break;
          }
        }
        if (t->hasRecompute) {
          os << " recompute";
          names(t->recompute, " ");
        }
        optional(" when ", t->when.get());
      } else if (auto *mt = dyn_cast<MountEntry>(e.get())) {
        os << "Mount " << mt->member.name;
        if (mt->indexVar)
          os << "[" << mt->indexVar->name << "]";
        os << " at ";
        tmpl(mt->path);
        optional(" when ", mt->when.get());
      } else if (auto *s = dyn_cast<ShardEntry>(e.get())) {
        os << "Shard";
        qualifiedNames(s->params);
        os << " on " << s->dim.name;
        if (s->axis)
          os << " by " << s->axis->name;
        if (s->replicate)
          os << " replicate";
        optional(" when ", s->when.get());
      } else if (auto *dv = dyn_cast<DerivedEntry>(e.get())) {
        os << "Derived \"" << dv->name << "\" from";
        qualifiedNames(dv->sources);
        if (dv->hasRecompute) {
          os << " recompute";
          names(dv->recompute, " ");
        }
      } else if (auto *bf = dyn_cast<BufferEntry>(e.get())) {
        os << "Buffer \"" << bf->name << "\"";
        optional(" when ", bf->when.get());
      } else if (auto *ch = dyn_cast<ChoiceDefaultEntry>(e.get())) {
        os << "ChoiceDefault " << ch->name.name << " = ";
        expr(ch->value.get());
      } else {
        auto *let = cast<LayoutLetEntry>(e.get());
        os << "Let " << let->let->name.name << " = ";
        expr(let->let->value.get());
      }
      end();
    }
    return;
  }
  auto *b = cast<BackendDecl>(d);
  os << "Backend " << b->name.name;
  if (b->base)
    os << " extends " << b->base->name;
  end();
  Nest n(indent);
  for (const BackendEntry &e : b->entries) {
    line(e.range.Start);
    switch (e.kind) {
    case BackendEntry::Mesh:
      os << "Mesh";
      names(e.names, " ");
      break;
    case BackendEntry::Class:
      os << "Class " << e.name.name << " = \"" << e.className << "\"";
      for (const auto &[key, value] : e.properties) {
        os << " " << key.name << "=";
        expr(value.get());
      }
      break;
    case BackendEntry::Capability:
      os << "Capability " << e.name.name << " = ";
      expr(e.value.get());
      break;
    case BackendEntry::Choice:
      os << "Choice " << e.name.name << " =";
      quoted(e.options);
      break;
    case BackendEntry::Let:
      os << "Let " << e.let->name.name << " = ";
      expr(e.let->value.get());
      break;
    case BackendEntry::Require:
      os << "Require ";
      expr(e.require->cond.get());
      os << " \"" << e.require->message << "\"";
      break;
    }
    end();
  }
}

void Dumper::file(const File &f) {
  os << "File \"" << f.path << "\"\n";
  Nest n(indent);
  for (const Import &i : f.imports) {
    line(i.range.Start);
    os << "Import \"" << i.path << "\"";
    end();
  }
  for (const DeclPtr &d : f.decls)
    decl(d.get());
}

} // namespace

void mdl::ast::dump(const File &file, llvm::SourceMgr &sourceMgr,
                    llvm::raw_ostream &os) {
  Dumper(sourceMgr, os).file(file);
}
