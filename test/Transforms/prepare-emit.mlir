// mdl-prepare-emit on IR as MLIRGen writes it: a backend's bases folded in,
// conditions that read the parallel context marked, view regions lowered to
// attributes; a view size that is no product of numbers and dimensions is
// an error.

// RUN: mdl-opt %s --mdl-prepare-emit --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: mdl.backend @b mesh ["tp"] {
// CHECK: mdl.let @vocab_multiple : i64 {
// CHECK-LABEL: mdl.layout @base of @m {
// CHECK: mdl.tensor ["w"] = <w[A, B]> view_axes [#mdl.view_axis<2, ["A", "B"], false, "A * B">, #mdl.view_axis<1, ["B"], true, "B">] when {
// CHECK: } {reads_context}
// CHECK-LABEL: mdl.layout @b of @m {
// CHECK: mdl.tensor ["w"] = <w[A, B]> view_axes
// CHECK-NOT: view {
module {
  mdl.backend @base mesh ["tp"] {
    mdl.let @vocab_multiple : i64 {
      %0 = mdl.constant 128 : i64
      %1 = mdl.context "tp" : i64
      %2 = mdl.binary mul %0, %1 : (i64, i64) -> i64
      mdl.yield %2 : i64
    }
  }
  mdl.backend @b extends @base mesh [] {
  }
  mdl.module model @m {
    mdl.config @n : i64 {
      %0 = mdl.hf "n" : i64
      mdl.yield %0 : i64
    }
    mdl.default_dtype {
      %0 = mdl.constant bf16 : !mdl.dtype
      mdl.yield %0 : !mdl.dtype
    }
    mdl.dim @A {
      %0 = mdl.get @n : i64
      mdl.yield %0 : i64
    }
    mdl.dim @B {
      %0 = mdl.constant 4 : i64
      mdl.yield %0 : i64
    }
    mdl.param @w : [[@A], [@B]]
  }
  mdl.layout @base of @m {
    mdl.tensor ["w"] = <w[A, B]> view {
      %0 = mdl.get @A : i64
      %1 = mdl.get @B : i64
      %2 = mdl.binary mul %0, %1 : (i64, i64) -> i64
      %3 = mdl.constant 2 : i64
      %4 = mdl.binary mul %2, %3 : (i64, i64) -> i64
      %5 = mdl.get @B : i64
      mdl.yield %4, %5 : i64, i64
    } when {
      %0 = mdl.context "tp" : i64
      %1 = mdl.constant 1 : i64
      %2 = mdl.binary gt %0, %1 : (i64, i64) -> i1
      mdl.yield %2 : i1
    }
  }
}

// -----

module {
  mdl.backend @b mesh [] {
  }
  mdl.module model @m {
    mdl.config @n : i64 {
      %0 = mdl.hf "n" : i64
      mdl.yield %0 : i64
    }
    mdl.default_dtype {
      %0 = mdl.constant bf16 : !mdl.dtype
      mdl.yield %0 : !mdl.dtype
    }
    mdl.dim @A {
      %0 = mdl.get @n : i64
      mdl.yield %0 : i64
    }
    mdl.param @w : [[@A]]
  }
  mdl.layout @b of @m {
    // expected-error@+1 {{a view size is a product of positive numbers and dimensions, which stand for their per-rank sizes}}
    mdl.tensor ["w"] = <w[A]> view {
      %0 = mdl.get @n : i64
      %1 = mdl.constant 4 : i64
      %2 = mdl.binary sub %0, %1 : (i64, i64) -> i64
      mdl.yield %2 : i64
    }
  }
}
