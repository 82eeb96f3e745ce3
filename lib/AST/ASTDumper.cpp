//===- ASTDumper.cpp - Print the MDL AST ----------------------------------===//
//
// One node per line, indented by depth, each with the line:col it came from.
// Expressions print on one line, fully parenthesised, so that a test can see
// how they were grouped.
//
//===----------------------------------------------------------------------===//

#include "mdl/AST/ASTDumper.h"

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
  void shape(const Shape &s);
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
    for (size_t i = 0; i < c->args.size(); ++i) {
      if (i)
        os << ", ";
      expr(c->args[i].get());
    }
    os << ")";
    return;
  }
  case Expr::Index: {
    auto *x = cast<IndexExpr>(e);
    expr(x->base.get());
    os << "[";
    expr(x->index.get());
    os << "]";
    return;
  }
  case Expr::Unary: {
    auto *x = cast<UnaryExpr>(e);
    os << (x->op == UnaryOp::Neg ? "(-" : "(!");
    expr(x->operand.get());
    os << ")";
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
    auto *x = cast<ListLitExpr>(e);
    os << "[";
    for (size_t i = 0; i < x->elements.size(); ++i) {
      if (i)
        os << ", ";
      expr(x->elements[i].get());
    }
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
  for (size_t i = 0; i < s.size(); ++i) {
    if (i)
      os << ", ";
    if (s[i].size() > 1)
      os << "(";
    for (size_t j = 0; j < s[i].size(); ++j)
      os << (j ? ", " : "") << s[i][j].name;
    if (s[i].size() > 1)
      os << ")";
  }
  os << "]";
}

void Dumper::product(const AxisProduct &p) {
  if (p.size() == 1) {
    term(p[0]);
    return;
  }
  os << "(";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i)
      os << ", ";
    term(p[i]);
  }
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
    for (size_t i = 0; i < t.parts.size(); ++i) {
      if (i)
        os << ", ";
      if (t.parts[i].isGroup()) {
        os << "(";
        for (size_t j = 0; j < t.parts[i].shape.size(); ++j) {
          if (j)
            os << ", ";
          term(t.parts[i].shape[j]);
        }
        os << ")";
        continue;
      }
      os << t.parts[i].param.str();
      if (!t.parts[i].shape.empty()) {
        os << ": ";
        product(t.parts[i].shape);
      }
    }
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
    os << "{";
    expr(seg.expr.get());
    os << "}";
  }
  os << '"';
}

void Dumper::call(const ModuleCall &c) {
  os << c.callee.name << "(";
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (i)
      os << ", ";
    if (c.args[i].name)
      os << c.args[i].name->name << " = ";
    expr(c.args[i].value.get());
  }
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
      for (size_t i = 0; i < x->roots.size(); ++i)
        os << (i ? ", \"" : " \"") << x->roots[i] << "\"";
    }
    if (x->detect) {
      os << " detect ";
      expr(x->detect.get());
    }
    break;
  }
  case Member::Deploy: {
    auto *x = cast<DeployMember>(m);
    os << "Deploy " << x->backend.name;
    for (auto &a : x->axes) {
      os << " " << a.name.name << "=";
      for (size_t i = 0; i < a.values.size(); ++i)
        os << (i ? "," : "") << a.values[i];
    }
    break;
  }
  case Member::Example: {
    os << "Example";
    for (auto &p : cast<ExampleMember>(m)->paths)
      os << " \"" << p.first << "\"";
    break;
  }
  case Member::Serves: {
    auto *x = cast<ServesMember>(m);
    os << "Serves " << x->key.name;
    for (auto &v : x->values)
      os << " \"" << v.first << "\"";
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
      for (size_t i = 0; i < x->factors.size(); ++i)
        os << (i ? ", " : "") << x->factors[i].name;
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
    if (x->style) {
      os << " " << spelling(x->style->kind);
      if (x->style->kind != ParallelStyle::Replicated)
        os << "(" << x->style->dim.name << ")";
    }
    if (x->cond) {
      os << " if ";
      expr(x->cond.get());
    }
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
    os << " " << spelling(x->style.kind);
    if (x->style.kind != ParallelStyle::Replicated)
      os << "(" << x->style.dim.name << ")";
    if (x->hasBias) {
      os << " bias";
      if (x->biasCond) {
        os << "(";
        expr(x->biasCond.get());
        os << ")";
      }
    }
    if (x->scaleBlock) {
      os << " scale(";
      expr(x->scaleBlock.get());
      os << ")";
    }
    if (x->cond) {
      os << " if ";
      expr(x->cond.get());
    }
    break;
  }
  case Member::Instance: {
    auto *x = cast<InstanceMember>(m);
    os << "Instance " << x->name.name << " = ";
    instance(x->expr);
    if (x->cond) {
      os << " if ";
      expr(x->cond.get());
    }
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
    for (size_t i = 0; i < x->first.size(); ++i)
      os << (i ? ", " : "") << x->first[i].name;
    os << ") stages(" << (x->staged ? x->staged->name : "") << ") last(";
    for (size_t i = 0; i < x->last.size(); ++i) {
      os << (i ? ", " : "") << x->last[i].name;
      for (auto &[wanted, fallback] : x->lastFallbacks)
        if (wanted.name == x->last[i].name)
          os << " ?? " << fallback.name;
    }
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
      if (p.defaultValue) {
        os << " = ";
        expr(p.defaultValue.get());
      }
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
        os << "Tensor ";
        tmpl(t->name);
        if (t->forStack)
          os << " for " << t->forStack->name << "[" << t->forVar->name << "]";
        os << " = ";
        if (t->tensor.param)
          os << t->tensor.param->str();
        os << "[";
        for (size_t i = 0; i < t->tensor.axes.size(); ++i) {
          if (i)
            os << ", ";
          product(t->tensor.axes[i]);
        }
        os << "]";
        for (const TensorOption &o : t->options) {
          switch (o.kind) {
          case TensorOption::Copy:
            os << " copy";
            if (o.value) {
              os << "(";
              expr(o.value.get());
              os << ")";
            }
            break;
          case TensorOption::Offset:
            os << " offset(";
            expr(o.value.get());
            os << ")";
            break;
          case TensorOption::DType:
            os << " as " << o.name.name;
            break;
          case TensorOption::View:
            os << " view[";
            for (size_t i = 0; i < o.shape.size(); ++i) {
              if (i)
                os << ", ";
              expr(o.shape[i].get());
            }
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
        if (t->when) {
          os << " when ";
          expr(t->when.get());
        }
      } else if (auto *mt = dyn_cast<MountEntry>(e.get())) {
        os << "Mount " << mt->member.name;
        if (mt->indexVar)
          os << "[" << mt->indexVar->name << "]";
        os << " at ";
        tmpl(mt->path);
        if (mt->when) {
          os << " when ";
          expr(mt->when.get());
        }
      } else if (auto *s = dyn_cast<ShardEntry>(e.get())) {
        os << "Shard";
        for (size_t i = 0; i < s->params.size(); ++i)
          os << (i ? ", " : " ") << s->params[i].str();
        os << " on " << s->dim.name;
        if (s->axis)
          os << " by " << s->axis->name;
        if (s->replicate)
          os << " replicate";
      } else if (auto *dv = dyn_cast<DerivedEntry>(e.get())) {
        os << "Derived \"" << dv->name << "\" from";
        for (size_t i = 0; i < dv->sources.size(); ++i)
          os << (i ? ", " : " ") << dv->sources[i].str();
        if (dv->hasRecompute) {
          os << " recompute";
          for (size_t i = 0; i < dv->recompute.size(); ++i)
            os << (i ? ", " : " ") << dv->recompute[i].name;
        }
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
      for (size_t i = 0; i < e.names.size(); ++i)
        os << (i ? ", " : " ") << e.names[i].name;
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
      for (auto &o : e.options)
        os << " \"" << o.first << "\"";
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
