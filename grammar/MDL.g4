// The MDL grammar. docs/language.md describes every construct; the front end
// (lib/Parse) turns the parse tree into the AST of include/mdl/AST/AST.h.
grammar MDL;

file : importDecl* topDecl* EOF ;

importDecl : 'import' STRING ';' ;

topDecl
  : moduleDecl
  | modelDecl
  | layoutDecl
  | backendDecl
  ;

// ---------------------------------------------------------------------------
// Modules and models
// ---------------------------------------------------------------------------

moduleDecl : 'module' name '(' (moduleParam (',' moduleParam)*)? ')' '{' member* '}' ;
modelDecl  : 'model' name ('extends' name)? '{' member* '}' ;
moduleParam : name ':' typeRef ('=' expr)? ;

typeRef
  : 'int'                     # intType
  | 'bool'                    # boolType
  | 'string'                  # stringType
  | 'dim'                     # dimType
  | 'dtype'                   # dtypeType
  | 'list' '<' typeRef '>'    # listType
  ;

member
  : configBlock
  | exampleDecl
  | servesDecl
  | letDecl
  | requireDecl
  | dimDecl
  | paramDecl
  | linearDecl
  | instanceDecl
  | stackDecl
  | pipelineDecl
  | needsDecl
  | dtypeDecl
  | deployDecl
  ;

configBlock : 'config' ('from' STRING (',' STRING)*)? '{' (configEntry | requireDecl)* '}' ;
// `detect [0, 1]`: when the config holds none of the keys the entry reads, a
// checkpoint settles it among these candidates.
configEntry : name ':' typeRef '=' expr ('detect' expr)? ';' ;
exampleDecl : 'example' STRING (',' STRING)* ';' ;
// serves architectures "Qwen3ForCausalLM"; serves model_type "qwen3";
servesDecl  : 'serves' name STRING (',' STRING)* ';' ;
letDecl     : 'let' name (':' typeRef)? '=' expr ';' ;
requireDecl : 'require' expr ':' STRING ';' ;
dtypeDecl   : 'dtype' '=' expr ';' ;

// dim P = N / G;   dim Hv = (Hk, R);  (factored: an index of Hv is a pair (hk, r))
dimDecl
  : 'dim' name '=' '(' name (',' name)+ ')' ';'   # factoredDim
  | 'dim' name '=' expr ';'                        # sizedDim
  ;

// param A_log: [Hv] f32 shard(Hk);   param b[E]: [F] column(F);
paramDecl
  : 'param' name expertIndex? ':' shape dtypeName? parallelStyle? condition? ';' ;

// linear q: [H] -> [G, P, D] column(G) bias(attention_bias);
// linear q_b: [Qa] -> [N, Dq] column(N) scale(block);   (FP8 block scales)
// linear gate[E]: [H] -> [F] column(F) bias mxfp4(quantized);   (MXFP4)
linearDecl
  : 'linear' name expertIndex? ':' shape '->' shape dtypeName? parallelStyle
    biasClause? scaleClause? mxfp4Clause? condition? ';' ;

expertIndex : '[' name ']' ;
shape : '[' (shapeAxis (',' shapeAxis)*)? ']' ;
shapeAxis
  : name                               # singleAxis
  | '(' name (',' name)+ ')'            # productAxis
  ;
dtypeName : name ;
parallelStyle
  : 'column' '(' name ')'     # columnStyle
  | 'row' '(' name ')'        # rowStyle
  | 'vocab' '(' name ')'      # vocabStyle
  | 'shard' '(' name ')'      # shardStyle
  | 'replicated'              # replicatedStyle
  ;
biasClause : 'bias' ('(' expr ')')? ;
scaleClause : 'scale' '(' expr ')' ;
mxfp4Clause : 'mxfp4' ('(' expr ')')? ;
condition : 'if' expr ;

// attn: match kind { "full_attention" => GatedAttention(H, N, G, D), _ => ... };
instanceDecl : name ':' instanceExpr condition? ';' ;
stackDecl    : 'stack' name '[' expr ']' 'as' name ':' instanceExpr ';' ;
instanceExpr
  : moduleCall                                             # directInstance
  | 'match' expr '{' matchArm (',' matchArm)* ','? '}'     # matchInstance
  ;
matchArm : matchPattern '=>' moduleCall ;
matchPattern
  : expr        # valuePattern
  | '_'         # wildcardPattern
  ;
moduleCall : name '(' (argument (',' argument)*)? ')' ;
argument : (name '=')? expr ;

// deploy vllm tp=1,2,4,8;  (parallel configurations real deployments use)
deployDecl : 'deploy' name deployAxis* ';' ;
deployAxis : name '=' INT (',' INT)* ;

// pipeline { first embed; stages layers; last norm, head, mtp; }
pipelineDecl : 'pipeline' '{' pipelineEntry* '}' ;
pipelineEntry
  : 'first' name (',' name)* ';'      # firstStage
  | 'last' lastItem (',' lastItem)* ';' # lastStage
  | 'stages' name ';'                 # stagedStack
  ;

// `head ?? embed`: the last stage needs head, or a copy of embed when there
// is no head (tied embeddings).
lastItem : name ('??' name)? ;

// needs uva fallback "plain torch gather";
needsDecl : 'needs' name ('fallback' STRING)? ';' ;

// ---------------------------------------------------------------------------
// Layouts: what one rank of a backend holds, in named dimensions
// ---------------------------------------------------------------------------

layoutDecl : 'layout' name 'of' name ('at' STRING)? '{' layoutEntry* '}' ;

layoutEntry
  : STRING forClause? '=' tensorExpr tensorOption* whenClause? ';'  # tensorEntry
  | name ('[' name ']')? 'at' STRING whenClause? ';'               # mountEntry
  | 'shard' qualifiedName (',' qualifiedName)* 'on' name
      ('by' name)? replicateClause? whenClause? ';'                # shardEntry
  | 'derived' STRING ('from' qualifiedName (',' qualifiedName)*
      | '=' tensorExpr) recomputeClause? whenClause? ';'            # derivedEntry
  | 'buffer' STRING whenClause? ';'                                # bufferEntry
  | letDecl                                                        # layoutLet
  | 'choice' name '=' expr ';'                                     # choiceDefault
  ;
forClause : 'for' name '[' name ']' ;
replicateClause : 'replicate' ;
recomputeClause : 'recompute' name (',' name)* ;
whenClause : 'when' expr ;

// q[(G, P, D), H] names one parameter; [(G, P, {q, gate}, D), H] selects the
// parameter through a part set.
tensorExpr : qualifiedName? '[' (axisExpr (',' axisExpr)*)? ']' ;
axisExpr
  : axisTerm                                  # simpleAxis
  | '(' axisTerm (',' axisTerm)+ ')'          # productAxisExpr
  ;
axisTerm
  : name                                      # dimTerm
  | INT                                       # unitTerm
  | '{' part (',' part)* '}'                  # partsTerm
  | '(' axisTerm ')'                          # parenTerm
  ;
// A part is a parameter with the dimensions it adds, or a group: a product
// holding a part set of its own (vLLM's per-head [q_h; gate_h] inside
// qkv_proj's [q; k; v]).
part
  : qualifiedName (':' partShape)?            # namedPart
  | '(' axisTerm (',' axisTerm)* ')'          # groupPart
  ;
partShape
  : axisTerm                                  # singlePartShape
  | '(' axisTerm (',' axisTerm)+ ')'          # productPartShape
  ;
tensorOption
  : 'copy' ('(' expr ')')?                    # copyOption
  | 'zero'                                    # zeroOption
  | 'offset' '(' expr ')'                     # offsetOption
  | 'neg_exp'                                 # negExpOption
  | 'as' dtypeName                            # dtypeOption
  | 'view' '[' expr (',' expr)* ']'           # viewOption
  | 'split' INT ('by' name)?                  # splitOption
  | 'on' name                                 # onOption
  ;
qualifiedName : name ('.' name)* ;

// ---------------------------------------------------------------------------
// Backend profiles
// ---------------------------------------------------------------------------

backendDecl : 'backend' name ('extends' name)? '{' backendEntry* '}' ;
backendEntry
  : 'mesh' name (',' name)* ';'                                   # meshEntry
  | 'class' (name | STRING) '=' STRING
    ('{' classProperty* '}' | ';')                                # classEntry
  | 'capability' name '=' expr ';'                                # capabilityEntry
  | 'choice' name '=' '[' STRING (',' STRING)* ']' ';'             # choiceEntry
  | letDecl                                                       # backendLet
  | requireDecl                                                   # backendRequire
  ;
classProperty : name '=' expr ';' ;

// ---------------------------------------------------------------------------
// Expressions
// ---------------------------------------------------------------------------

expr
  : primary                                                # primaryExpr
  | expr '[' expr ']'                                      # indexExpr
  | op=('-' | '!') expr                                    # unaryExpr
  | expr op=('*' | '/' | '%') expr                         # mulExpr
  | expr op=('+' | '-') expr                               # addExpr
  | expr op=('<' | '<=' | '>' | '>=') expr                 # relExpr
  | expr op=('==' | '!=') expr                             # eqExpr
  | expr 'in' expr                                         # inExpr
  | expr 'is' name                                         # isExpr
  | expr '&&' expr                                         # andExpr
  | expr '||' expr                                         # orExpr
  | <assoc=right> expr '??' expr                           # coalesceExpr
  | <assoc=right> expr '?' expr ':' expr                   # condExpr
  ;

primary
  : INT                                                    # intLit
  | STRING                                                 # stringLit
  | ('true' | 'false')                                     # boolLit
  | name '(' (expr (',' expr)*)? ')'                       # callExpr
  | name                                                   # nameRef
  | '(' expr ')'                                           # parenExpr
  | '[' expr 'for' name 'in' expr ']'                      # comprehension
  | '[' (expr (',' expr)*)? ']'                            # listLit
  ;

// Words that are keywords only where the grammar expects them.
name
  : IDENT
  | 'first' | 'last' | 'stages' | 'copy' | 'offset' | 'view' | 'split'
  | 'derived' | 'recompute' | 'fallback' | 'example' | 'mesh' | 'class'
  | 'capability' | 'needs' | 'replicate' | 'on' | 'by' | 'column' | 'row'
  | 'vocab' | 'shard' | 'replicated' | 'bias' | 'scale' | 'pipeline' | 'extends'
  | 'from' | 'dtype' | 'choice' | 'deploy' | 'detect' | 'buffer' | 'zero'
  | 'neg_exp' | 'mxfp4'
  ;

INT     : [0-9]+ ;
STRING  : '"' ( ~["\\\r\n] | '\\' ~[\r\n] )* '"' ;
IDENT   : [a-zA-Z_] [a-zA-Z_0-9]* ;
// Comments stay in the token stream, on the hidden channel the parser does
// not read, for the formatter (lib/Parse/Format.cpp).
LINE_COMMENT  : '//' ~[\r\n]* -> channel(HIDDEN) ;
BLOCK_COMMENT : '/*' .*? '*/' -> channel(HIDDEN) ;
WS      : [ \t\r\n]+ -> skip ;
