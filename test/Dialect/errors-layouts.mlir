// RUN: mdl-opt %s -split-input-file -verify-diagnostics

// The verifiers of layout entries.

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.input @n : i64
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op names its parameter both before the axes and in a part set}}
  mdl.tensor ["x"] = <p[{p}]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op holds no parameter}}
  mdl.tensor ["x"] = <[H]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op part sets cannot nest}}
  mdl.tensor ["x"] = <[{p: {p}}]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op names parameter 'q': 'c' has no parameter 'q'}}
  mdl.tensor ["x"] = <q[H]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.input @n : i64
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op uses 'n', which is not a dimension of 'c' (for parameter 'p')}}
  mdl.tensor ["x"] = <p[n]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op splits axis 3 of a tensor with 1 axes}}
  mdl.tensor ["x"] = <p[H]> split 3
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+2 {{custom op 'mdl.tensor' expected ::mdl::MeshAxisKind to be one of: tp, pp, ep, etp, cp, dp}}
  // expected-error@+1 {{custom op 'mdl.tensor' failed to parse MDL_MeshAxisKindAttr parameter 'value' which is to be a `::mdl::MeshAxisKind`}}
  mdl.tensor ["x"] = <p[H]> split 0 by <xx>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+2 {{custom op 'mdl.tensor' expected ::mdl::StageKind to be one of: first, last}}
  // expected-error@+1 {{custom op 'mdl.tensor' failed to parse MDL_StageKindAttr parameter 'value' which is to be a `::mdl::StageKind`}}
  mdl.tensor ["x"] = <p[H]> on <middle>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op is repeated for 'p', which is not a stack of the module}}
  mdl.tensor ["x"] for @p = <p[H]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op regions take 0 block argument(s)}}
  mdl.tensor ["x", 0] = <p[H]> args {
  ^bb0(%i: i64):
    mdl.yield %i : i64
  }
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.input @n : i64
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op name is indexed by 'n', which is not a dimension}}
  mdl.tensor ["x.", @n] = <p[H]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op name uses argument 1 but its args region yields 0}}
  mdl.tensor ["x.", 1] = <p[H]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op name segments are strings, dimension symbols or argument numbers}}
  mdl.tensor ["x.", 1.5] = <p[H]>
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op name arguments are i64 or !mdl.string}}
  mdl.tensor ["x.", 0] = <p[H]> args {
    %0 = mdl.constant true : i1
    mdl.yield %0 : i1
  }
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.tensor' op view sizes are i64}}
  mdl.tensor ["x"] = <p[H]> view {
    %0 = mdl.constant true : i1
    mdl.yield %0 : i1
  }
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @c {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.mount' op mounts 'p', which is not an instance or stack}}
  mdl.mount @p at ["x"]
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @d { }
mdl.module @c {
  mdl.stack @s count {
    %0 = mdl.constant 2 : i64
    mdl.yield %0 : i64
  } {
    mdl.case @d [] {
    ^bb0(%i: i64):
      mdl.yield
    }
  }
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.mount' op path arguments take 1 block argument(s)}}
  mdl.mount @s at ["x"] args {
    mdl.yield
  }
}

// -----

mdl.backend @b mesh ["tp"] { }
mdl.module @d { }
mdl.module @c {
  mdl.instance @i {
    mdl.case @d [] {
      mdl.yield
    }
  }
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.mount' op a mount path has no family dimensions}}
  mdl.mount @i at ["x.", @i]
}

// -----

// A choice default belongs in a layout of a model.
mdl.backend @b mesh [] {
  mdl.choice @storage ["plain", "packed"]
}
mdl.module @c {
  mdl.input @H : i64 dim
}
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.choice_default' op sets a choice default in a layout of module 'c', not of a model}}
  mdl.choice_default @storage {
    %0 = mdl.constant "plain" : !mdl.string
    mdl.yield %0 : !mdl.string
  }
}

// -----

mdl.backend @b mesh [] {
  mdl.choice @storage ["plain", "packed"]
}
mdl.module model @m {
}
mdl.layout @b of @m {
  // expected-error@+1 {{'mdl.choice_default' op names no choice of backend 'b'}}
  mdl.choice_default @nesting {
    %0 = mdl.constant "flat" : !mdl.string
    mdl.yield %0 : !mdl.string
  }
}

// -----

mdl.backend @b mesh [] {
  mdl.choice @storage ["plain", "packed"]
}
mdl.module model @m {
}
mdl.layout @b of @m {
  // expected-error@+1 {{'mdl.choice_default' op value region must yield 1 value(s) of type(s) ('!mdl.string') but yields ('i64')}}
  mdl.choice_default @storage {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  }
}
