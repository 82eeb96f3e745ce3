// RUN: mdl-opt %s -split-input-file -verify-diagnostics

// Every verifier of the dialect, one case each.

mdl.module model @m {
  // expected-error@+1 {{'mdl.input' op a model takes no inputs}}
  mdl.input @x : i64
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.config' op belongs in a model, and 'm' is a module}}
  mdl.config @x : i64 {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  }
}

// -----

// expected-error@+1 {{'mdl.module' op only a model has examples}}
mdl.module @m attributes {examples = ["a.json"]} {
}

// -----

// expected-error@+1 {{'mdl.module' op only a model serves architectures or model types}}
mdl.module @m attributes {model_types = ["m"]} {
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.yield' op cannot appear in a module}}
  mdl.yield
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.input' op a dimension input must be an i64}}
  mdl.input @x : i1 dim
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.let' op value region must yield 1 value(s) of type(s) ('i64') but yields ('i1')}}
  mdl.let @x : i64 {
    %0 = mdl.constant true : i1
    mdl.yield %0 : i1
  }
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.dim' op a dimension has either a size or factors}}
  mdl.dim @x
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.dim' op a dimension cannot be its own factor}}
  mdl.dim @x factors [@x]
}

// -----

mdl.module @m {
  mdl.let @y : i64 {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  }
  // expected-error@+1 {{'mdl.dim' op factor 'y' is not a dimension}}
  mdl.dim @x factors [@y]
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  // expected-error@+1 {{'mdl.param' op shape names 'K', which is not a dimension of the module}}
  mdl.param @p : [[@H], [@K]]
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  // expected-error@+1 {{'mdl.param' op shape axes must be non-empty lists of dimensions}}
  mdl.param @p : [[]]
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  mdl.input @n : i64
  // expected-error@+1 {{'mdl.param' op expert dimension 'n' is not a dimension of the module}}
  mdl.param @p[@n] : [[@H]]
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  // expected-error@+1 {{'mdl.param' op column and row styles are for linears}}
  mdl.param @p : [[@H]] style <column, "H">
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  mdl.input @G : i64 dim
  // expected-error@+1 {{'mdl.param' op style splits 'G', which is not a dimension of the shape}}
  mdl.param @p : [[@H]] style <shard, "G">
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  // expected-error@+1 {{style 'shard' needs the dimension it splits}}
  mdl.param @p : [[@H]] style <shard, "">
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  mdl.input @F : i64 dim
  // expected-error@+1 {{'mdl.linear' op splits output dimension 'H', which the output does not have}}
  mdl.linear @l : [[@H]] -> [[@F]] <column, "H">
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  mdl.input @F : i64 dim
  // expected-error@+1 {{'mdl.linear' op splits input dimension 'F', which the input does not have}}
  mdl.linear @l : [[@H]] -> [[@F]] <row, "F">
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  mdl.input @F : i64 dim
  // expected-error@+1 {{'mdl.linear' op a linear is split by column, row or vocab}}
  mdl.linear @l : [[@H]] -> [[@F]] <shard, "F">
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  mdl.input @F : i64 dim
  // expected-error@+1 {{'mdl.linear' op has a bias condition but no bias}}
  mdl.linear @l : [[@H]] -> [[@F]] <column, "F"> bias_if {
    %0 = mdl.constant true : i1
    mdl.yield %0 : i1
  }
}

// -----

mdl.module @m {
  // expected-error@+1 {{'mdl.instance' op needs at least one mdl.case}}
  mdl.instance @i {
  ^bb0:
  }
}

// -----

mdl.module @c { }
mdl.module @m {
  // expected-error@+1 {{'mdl.stack' op may only hold mdl.case ops}}
  mdl.stack @s count {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  } {
    mdl.needs "uva"
  }
}

// -----

mdl.module @m {
  mdl.instance @i {
    // expected-error@+1 {{'mdl.case' op instantiates unknown module 'nothing'}}
    mdl.case @nothing [] {
      mdl.yield
    }
  }
}

// -----

mdl.module model @top { }
mdl.module @m {
  mdl.instance @i {
    // expected-error@+1 {{'mdl.case' op 'top' is a model and cannot be instantiated}}
    mdl.case @top [] {
      mdl.yield
    }
  }
}

// -----

mdl.module @c { }
mdl.module @m {
  mdl.stack @s count {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  } {
    // expected-error@+1 {{'mdl.case' op inside a stack, a case takes the index as one i64 argument}}
    mdl.case @c [] {
      mdl.yield
    }
  }
}

// -----

mdl.module @c {
  mdl.input @H : i64
}
mdl.module @m {
  mdl.instance @i {
    // expected-error@+1 {{'mdl.case' op 'c' has no input 'K'}}
    mdl.case @c ["K"] {
      %0 = mdl.constant 1 : i64
      mdl.yield %0 : i64
    }
  }
}

// -----

mdl.module @c {
  mdl.input @H : i64
}
mdl.module @m {
  mdl.instance @i {
    // expected-error@+1 {{'mdl.case' op input 'H' of 'c' has no default and is not given}}
    mdl.case @c [] {
      mdl.yield
    }
  }
}

// -----

mdl.module @c {
  mdl.input @H : i64
}
mdl.module @m {
  mdl.instance @i {
    // expected-error@+1 {{'mdl.case' op input 'H' is given twice}}
    mdl.case @c ["H", "H"] {
      %0 = mdl.constant 1 : i64
      mdl.yield %0, %0 : i64, i64
    }
  }
}

// -----

mdl.module model @m {
  // expected-error@+1 {{'mdl.pipeline' op places 'nothing', which is not a member of the model}}
  mdl.pipeline first [@nothing] last []
}

// -----

mdl.module @c { }
mdl.module model @m {
  mdl.instance @i {
    mdl.case @c [] {
      mdl.yield
    }
  }
  // expected-error@+1 {{'mdl.pipeline' op only a stack can be spread over stages}}
  mdl.pipeline first [] stages @i last []
}

// -----

mdl.module @c { }
// expected-error@+1 {{'mdl.layout' op describes unknown backend 'nowhere'}}
mdl.layout @nowhere of @c {
}

// -----

mdl.backend @b mesh [] { }
// expected-error@+1 {{'mdl.layout' op describes unknown module 'nothing'}}
mdl.layout @b of @nothing {
}

// -----

mdl.backend @b mesh [] { }
mdl.module @c { }
mdl.layout @b of @c {
  // expected-error@+1 {{'mdl.needs' op cannot appear in a layout}}
  mdl.needs "uva"
}

// -----

mdl.module @c { }
mdl.module @m {
  // A region of an op whose regions need no terminator.
  // expected-error@+1 {{'mdl.instance' op condition region must end in mdl.yield}}
  mdl.instance @i {
    mdl.case @c [] {
      mdl.yield
    }
  } if {
    %0 = mdl.constant true : i1
  }
}

// -----

mdl.module @m {
  mdl.input @H : i64 dim
  // expected-error@+1 {{'mdl.param' op shape names dimensions by symbol}}
  mdl.param @p : [["H"]]
}

// -----

// The detect candidates of a config entry are a list of its type.
mdl.module model @m {
  // expected-error@+1 {{'mdl.config' op detect region must yield 1 value(s) of type(s) ('!mdl.list<i64>') but yields ('i64')}}
  mdl.config @x : i64 {
    %0 = mdl.hf "x" : i64
    mdl.yield %0 : i64
  } detect {
    %0 = mdl.constant 1 : i64
    mdl.yield %0 : i64
  }
}
