// RUN: mdl-opt %s -split-input-file -verify-diagnostics

// The verifiers of backends and expressions.

// expected-error@+1 {{'mdl.backend' op unknown mesh axis "zz"}}
mdl.backend @b mesh ["zz"] { }

// -----

// expected-error@+1 {{'mdl.backend' op extends an unknown backend}}
mdl.backend @b extends @nowhere mesh [] { }

// -----

// expected-error@+1 {{'mdl.backend' op extends itself}}
mdl.backend @b extends @c mesh [] { }
mdl.backend @c extends @b mesh [] { }

// -----

mdl.backend @b mesh [] {
  // expected-error@+1 {{'mdl.needs' op cannot appear in a backend}}
  mdl.needs "uva"
}

// -----

mdl.backend @b mesh [] {
  // expected-error@+1 {{'mdl.capability' op value region must yield 1 value(s) of type(s) ('i1') but yields ('i64')}}
  mdl.capability "uva" {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    // expected-error@+1 {{'mdl.constant' op value "one" is not a literal of 'i64'}}
    %0 = mdl.constant "one" : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    // expected-error@+1 {{'mdl.get' op 'y' is not an input, config entry, let or dim in scope}}
    %0 = mdl.get @y : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.module @m {
  mdl.input @y : i1
  mdl.let @x : i64 {
    // expected-error@+1 {{'mdl.get' op 'y' has type 'i1', not 'i64'}}
    %0 = mdl.get @y : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.backend @b mesh [] {
  mdl.let @x : i64 {
    // expected-error@+1 {{'mdl.context' op unknown context value 'xp'}}
    %0 = mdl.context "xp" : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.backend @b mesh [] {
  mdl.let @x : i64 {
    // expected-error@+1 {{'mdl.context' op 'first_stage' has type 'i1'}}
    %0 = mdl.context "first_stage" : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    // expected-error@+1 {{'mdl.context' op the parallel context is read only in layouts and backends}}
    %0 = mdl.context "tp" : i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    %0 = mdl.constant true : i1
    // expected-error@+1 {{'mdl.binary' op arithmetic is on i64}}
    %1 = mdl.binary add %0, %0 : (i1, i1) -> i64
    mdl.yield %1 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i1 {
    %0 = mdl.constant 1 : i64
    // expected-error@+1 {{'mdl.binary' op compares two i64 into an i1}}
    %1 = mdl.binary lt %0, %0 : (i64, i64) -> i64
    mdl.yield %0 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i1 {
    %0 = mdl.constant 1 : i64
    %1 = mdl.constant true : i1
    // expected-error@+1 {{'mdl.binary' op compares two values of one type into an i1}}
    %2 = mdl.binary eq %0, %1 : (i64, i1) -> i1
    mdl.yield %2 : i1
  }
}

// -----

mdl.module @m {
  mdl.let @x : i1 {
    %0 = mdl.constant 1 : i64
    // expected-error@+1 {{'mdl.binary' op combines two i1}}
    %1 = mdl.binary and %0, %0 : (i64, i64) -> i1
    mdl.yield %1 : i1
  }
}

// -----

mdl.module @m {
  mdl.let @x : !mdl.string {
    %0 = mdl.constant 1 : i64
    // expected-error@+1 {{'mdl.binary' op concatenates two strings or two lists of one type}}
    %1 = mdl.binary concat %0, %0 : (i64, i64) -> !mdl.string
    mdl.yield %1 : !mdl.string
  }
}

// -----

mdl.module @m {
  mdl.let @x : i1 {
    %0 = mdl.constant [1, 2] : !mdl.list<i64>
    %1 = mdl.constant 0 : i64
    // expected-error@+1 {{'mdl.index' op the result has the list's element type}}
    %2 = mdl.index %0[%1] : <i64> -> i1
    mdl.yield %2 : i1
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    %0 = mdl.constant 1 : i64
    // expected-error@+1 {{'mdl.builtin' op len() takes a list or string and gives an i64}}
    %1 = mdl.builtin "len"(%0) : (i64) -> i64
    mdl.yield %1 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    %0 = mdl.constant 1 : i64
    // expected-error@+1 {{'mdl.builtin' op min() has the wrong signature}}
    %1 = mdl.builtin "min"(%0) : (i64) -> i64
    mdl.yield %1 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : i64 {
    %0 = mdl.constant 1 : i64
    // expected-error@+1 {{'mdl.builtin' op unknown builtin 'frob'}}
    %1 = mdl.builtin "frob"(%0) : (i64) -> i64
    mdl.yield %1 : i64
  }
}

// -----

mdl.module @m {
  mdl.let @x : !mdl.list<i64> {
    %0 = mdl.constant [1, 2] : !mdl.list<i64>
    // expected-error@+1 {{'mdl.comprehension' op the body takes one 'i64'}}
    %1 = mdl.comprehension %0 {
    ^bb0(%a: i1):
      %2 = mdl.constant 1 : i64
      mdl.yield %2 : i64
    } : <i64> -> <i64>
    mdl.yield %1 : !mdl.list<i64>
  }
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  // expected-error@+1 {{a replicated parameter splits no dimension}}
  mdl.param @p : [[@H]] style <replicated, "H">
}

// -----

mdl.backend @b mesh [] { }
mdl.module @m {
  mdl.input @H : i64 dim
  mdl.param @p : [[@H]]
}
mdl.layout @b of @m {
  // expected-error@+1 {{a number in a layout must be 1}}
  mdl.tensor ["x"] = <p[H, 2]>
}
