//===- MDLAttrs.cpp - Attributes and types of the mdl dialect -------------===//

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/Base/DType.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mdl;

#include "mdl/Dialect/MDL/MDLEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "mdl/Dialect/MDL/MDLOpsTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "mdl/Dialect/MDL/MDLAttrs.cpp.inc"

void MDLDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "mdl/Dialect/MDL/MDLOpsTypes.cpp.inc"
      >();
}

void MDLDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mdl/Dialect/MDL/MDLAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ParallelStyleAttr
//===----------------------------------------------------------------------===//

LogicalResult
ParallelStyleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          StyleKind kind, StringAttr dim) {
  if (kind == StyleKind::replicated && dim)
    return emitError() << "a replicated parameter splits no dimension";
  if (kind != StyleKind::replicated && (!dim || dim.getValue().empty()))
    return emitError() << "style '" << stringifyStyleKind(kind)
                       << "' needs the dimension it splits";
  return success();
}

//===----------------------------------------------------------------------===//
// TermAttr: printed in the syntax of .mdl layouts
//===----------------------------------------------------------------------===//

TermAttr TermAttr::getDim(MLIRContext *ctx, StringRef name) {
  return get(ctx, TermKind::dim, StringAttr::get(ctx, name),
             ArrayAttr::get(ctx, {}));
}
TermAttr TermAttr::getUnit(MLIRContext *ctx) {
  return get(ctx, TermKind::unit, StringAttr::get(ctx, ""),
             ArrayAttr::get(ctx, {}));
}
TermAttr TermAttr::getProduct(MLIRContext *ctx, ArrayRef<Attribute> terms) {
  return get(ctx, TermKind::product, StringAttr::get(ctx, ""),
             ArrayAttr::get(ctx, terms));
}
TermAttr TermAttr::getParts(MLIRContext *ctx, ArrayRef<Attribute> parts) {
  return get(ctx, TermKind::parts, StringAttr::get(ctx, ""),
             ArrayAttr::get(ctx, parts));
}
TermAttr TermAttr::getPart(MLIRContext *ctx, StringRef param,
                           ArrayRef<Attribute> terms) {
  return get(ctx, TermKind::part, StringAttr::get(ctx, param),
             ArrayAttr::get(ctx, terms));
}

SmallVector<TermAttr, 4> TermAttr::terms() const {
  SmallVector<TermAttr, 4> out;
  for (Attribute a : getChildren())
    out.push_back(llvm::cast<TermAttr>(a));
  return out;
}

static void printTerms(AsmPrinter &p, ArrayRef<TermAttr> terms) {
  if (terms.size() == 1) {
    terms.front().printBody(p);
    return;
  }
  p << "(";
  llvm::interleaveComma(terms, p, [&](TermAttr t) { t.printBody(p); });
  p << ")";
}

void TermAttr::printBody(AsmPrinter &p) const {
  switch (getKind()) {
  case TermKind::dim:
    p << getName().getValue();
    return;
  case TermKind::unit:
    p << "1";
    return;
  case TermKind::product:
    p << "(";
    llvm::interleaveComma(terms(), p, [&](TermAttr t) { t.printBody(p); });
    p << ")";
    return;
  case TermKind::parts:
    p << "{";
    llvm::interleaveComma(terms(), p, [&](TermAttr t) { t.printBody(p); });
    p << "}";
    return;
  case TermKind::part:
    if (getName().getValue().empty()) { // a group
      p << "(";
      llvm::interleaveComma(terms(), p, [&](TermAttr t) { t.printBody(p); });
      p << ")";
      return;
    }
    p << getName().getValue();
    if (!getChildren().empty()) {
      p << ": ";
      printTerms(p, terms());
    }
    return;
  }
}

/// Parses a bare identifier, dots allowed (`experts.gate`).
static ParseResult parseName(AsmParser &parser, std::string &name) {
  StringRef word;
  if (parser.parseKeyword(&word))
    return failure();
  name = word.str();
  return success();
}

/// The rest of a product once its `(` is read: term (`,` term)* `)`.
static ParseResult parseProductTail(AsmParser &parser,
                                    SmallVectorImpl<Attribute> &terms) {
  do {
    TermAttr t = TermAttr::parseBody(parser);
    if (!t)
      return failure();
    terms.push_back(t);
  } while (succeeded(parser.parseOptionalComma()));
  return parser.parseRParen();
}

/// term ::= name | `1` | `(` term (`,` term)* `)` | `{` part (`,` part)* `}`
TermAttr TermAttr::parseBody(AsmParser &parser) {
  MLIRContext *ctx = parser.getContext();
  if (succeeded(parser.parseOptionalLParen())) {
    SmallVector<Attribute> terms;
    if (parseProductTail(parser, terms))
      return {};
    return getProduct(ctx, terms);
  }
  if (succeeded(parser.parseOptionalLBrace())) {
    SmallVector<Attribute> parts;
    do {
      // A group: a product holding a part set of its own.
      if (succeeded(parser.parseOptionalLParen())) {
        SmallVector<Attribute> terms;
        if (parseProductTail(parser, terms))
          return {};
        parts.push_back(getPart(ctx, "", terms));
        continue;
      }
      std::string param;
      if (parseName(parser, param))
        return {};
      SmallVector<Attribute> terms;
      if (succeeded(parser.parseOptionalColon())) {
        TermAttr t = parseBody(parser);
        if (!t)
          return {};
        if (t.getKind() == TermKind::product)
          terms.append(t.getChildren().begin(), t.getChildren().end());
        else
          terms.push_back(t);
      }
      parts.push_back(getPart(ctx, param, terms));
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRBrace())
      return {};
    return getParts(ctx, parts);
  }
  int64_t unit = 0;
  OptionalParseResult intResult = parser.parseOptionalInteger(unit);
  if (intResult.has_value()) {
    if (failed(*intResult))
      return {};
    if (unit != 1) {
      parser.emitError(parser.getCurrentLocation(),
                       "a number in a layout must be 1");
      return {};
    }
    return getUnit(ctx);
  }
  std::string name;
  if (parseName(parser, name))
    return {};
  return getDim(ctx, name);
}

Attribute TermAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  TermAttr t = parseBody(parser);
  if (!t || parser.parseGreater())
    return {};
  return t;
}

void TermAttr::print(AsmPrinter &p) const {
  p << "<";
  printBody(p);
  p << ">";
}

//===----------------------------------------------------------------------===//
// LayoutAttr: `#mdl.layout<q[(G, D), H]>`
//===----------------------------------------------------------------------===//

SmallVector<TermAttr, 4> LayoutAttr::axisTerms() const {
  SmallVector<TermAttr, 4> out;
  for (Attribute a : getAxes())
    out.push_back(llvm::cast<TermAttr>(a));
  return out;
}

Attribute LayoutAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  if (parser.parseLess())
    return {};
  StringAttr param;
  std::string name;
  if (failed(parser.parseOptionalLSquare())) {
    if (parseName(parser, name) || parser.parseLSquare())
      return {};
    param = StringAttr::get(ctx, name);
  }
  SmallVector<Attribute> axes;
  if (failed(parser.parseOptionalRSquare())) {
    do {
      TermAttr t = TermAttr::parseBody(parser);
      if (!t)
        return {};
      // Each axis is a product, even of one term.
      if (t.getKind() != TermKind::product)
        t = TermAttr::getProduct(ctx, {t});
      axes.push_back(t);
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRSquare())
      return {};
  }
  if (parser.parseGreater())
    return {};
  return LayoutAttr::get(ctx, param, ArrayAttr::get(ctx, axes));
}

void LayoutAttr::print(AsmPrinter &p) const {
  p << "<";
  if (getParam())
    p << getParam().getValue();
  p << "[";
  llvm::interleaveComma(axisTerms(), p, [&](TermAttr axis) {
    printTerms(p, axis.terms());
  });
  p << "]>";
}

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

DType mdl::toDType(ElementType t) {
  // The two enums list the same types under the same spec names.
  std::optional<DType> d = parseDType(stringifyElementType(t).str());
  assert(d && "every element type has a runtime dtype");
  return *d;
}

ElementType mdl::toElementType(DType t) {
  std::optional<ElementType> e = symbolizeElementType(specName(t));
  assert(e && "every runtime dtype has an element type");
  return *e;
}
