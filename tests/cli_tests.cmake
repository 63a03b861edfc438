# The dash-attn CLI (included by tests/CMakeLists.txt): a readable plan, a simulation, help per command, and
# errors that name the argument as the user typed it (exit code 2).
add_test(NAME cli.plan COMMAND dash-attn plan --seqlen 1024 --heads 1 --causal --hdim 128 --block-m 128
                               --block-n 128 --schedule symmetric-shift)
set_tests_properties(cli.plan PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "dQ7: K3, K2, K1, K0, K4, K5, K6, K7")
add_test(NAME cli.simulate COMMAND dash-attn simulate --seqlen 16384 --heads 16 --hdim 64 --ctas 12)
set_tests_properties(cli.simulate PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "shift +- +rejected: schedule: shift cannot run this problem on 12 CTAs: the plan's waits need 16 co-resident")
add_test(NAME cli.bad_integer COMMAND dash-attn plan --seqlen abc)
set_tests_properties(cli.bad_integer PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--seqlen: expected an integer")
add_test(NAME cli.bad_heads COMMAND dash-attn simulate --heads 6 --heads-kv 4)
set_tests_properties(cli.bad_heads PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--heads-kv: --heads \\(6\\) must be a multiple of --heads-kv \\(4\\)")
add_test(NAME cli.unknown_option COMMAND dash-attn plan --bogus 1)
set_tests_properties(cli.unknown_option PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--bogus: unknown option")
add_test(NAME cli.named_planner_too_few_ctas COMMAND dash-attn plan --seqlen 16384 --schedule shift --ctas 12 --hdim 64)
set_tests_properties(cli.named_planner_too_few_ctas PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "needs? 16 co-resident CTAs")
add_test(NAME cli.check_cpu COMMAND dash-attn check --seqlen 300 --heads 2 --hdim 64 --causal --device cpu --runs 3)
set_tests_properties(cli.check_cpu PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "all runs bitwise identical")
# Head dims the kernels are not built for: refused, except for plan / simulate studies with --any-hdim. The list is the
# kernel table's (head_dim, head_dim_v) pairs, a pair written --hdim/--hdim-v.
add_test(NAME cli.hdim_not_built COMMAND dash-attn plan --hdim 72 --seqlen 256)
set_tests_properties(cli.hdim_not_built PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--hdim: 72 is not a head dim the kernels are built for [(]64, 96, 128, 192/128 and 256[)]; pass --any-hdim")
add_test(NAME cli.any_hdim COMMAND dash-attn simulate --hdim 72 --any-hdim --seqlen 1024 --heads 2)
set_tests_properties(cli.any_hdim PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "hdim 72")
add_test(NAME cli.check_hdim_not_built COMMAND dash-attn check --hdim 80 --seqlen 64 --device cpu)
set_tests_properties(cli.check_hdim_not_built PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--hdim: 80 is not a head dim the kernels are built for")
# --hdim-v: the value head dim (MLA-style 192/128). A pair of the table plans and simulates (the backward tiles of a
# forward-only row are the rule's, 64 x 128); another value head dim is refused naming --hdim-v.
add_test(NAME cli.plan_hdim_v COMMAND dash-attn plan --hdim 192 --hdim-v 128 --seqlen 300 --heads 2 --causal --items 2)
set_tests_properties(cli.plan_hdim_v PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "problem +batch 1, heads 2, seqlen 300, hdim 192 [(]v 128[)], causal.*tiles +64x64: 5 Q tiles, 5 KV tiles")
add_test(NAME cli.simulate_hdim_v COMMAND dash-attn simulate --hdim 256 --seqlen 1024 --heads 2)
set_tests_properties(cli.simulate_hdim_v PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "hdim 256, full; tiles 64x64;")
add_test(NAME cli.hdim_v_not_built COMMAND dash-attn plan --hdim 192 --seqlen 256)
set_tests_properties(cli.hdim_v_not_built PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--hdim-v: 192 is not built with --hdim 192 [(]the kernels' pairs: 64, 96, 128, 192/128 and 256[)]")
add_test(NAME cli.hdim_v_zero COMMAND dash-attn plan --hdim-v 0)
set_tests_properties(cli.hdim_v_zero PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--hdim-v: must be >= 1, got 0")
# check: the CPU backend runs the backward at every row (a float reference).
add_test(NAME cli.check_cpu_hdim_v COMMAND dash-attn check --hdim 192 --hdim-v 128 --seqlen 70 --heads 2 --causal
                                           --device cpu --runs 2)
set_tests_properties(cli.check_cpu_hdim_v PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "hdim 192 [(]v 128[)], causal.*all runs bitwise identical")
add_test(NAME cli.check_cpu_hdim_256 COMMAND dash-attn check --hdim 256 --seqlen 65 --heads 2 --device cpu --runs 2)
set_tests_properties(cli.check_cpu_hdim_256 PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "hdim 256, full.*all runs bitwise identical")
# Limits before work: an impossible size is refused at once, naming the limit (the planner never runs:
# PlanLimits.AnImpossibleSizeIsRefusedBeforeAnyPlannerRuns).
add_test(NAME cli.plan_limits COMMAND dash-attn plan --seqlen 10000000)
set_tests_properties(cli.plan_limits PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--seqlen: 10000000 needs 156250 Q tiles of 64 rows; the plan format indexes at most 65535")
add_test(NAME cli.simulate_limits COMMAND dash-attn simulate --seqlen 1500000 --heads 1)
set_tests_properties(cli.simulate_limits PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "the plan format holds at most 2\\^28")
add_test(NAME cli.check_limits COMMAND dash-attn check --seqlen 10000000 --device cpu)
set_tests_properties(cli.check_limits PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--seqlen: 10000000 needs")
add_test(NAME cli.check_host_memory COMMAND dash-attn check --seqlen 1000000 --heads 64 --device cpu)
set_tests_properties(cli.check_host_memory PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--seqlen: these tensors need [0-9.]+ GiB of host memory")

# Help per command: `COMMAND --help`, `COMMAND -h` and `help COMMAND` list that command's options (exit 0).
add_test(NAME cli.plan_help COMMAND dash-attn plan --help)
set_tests_properties(cli.plan_help PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "usage: dash-attn plan.*--schedule NAME")
add_test(NAME cli.plan_help_exits_0 COMMAND dash-attn plan --help) # no regex: ctest checks the exit code
set_tests_properties(cli.plan_help_exits_0 PROPERTIES LABELS cpu)
add_test(NAME cli.simulate_help COMMAND dash-attn simulate -h)
set_tests_properties(cli.simulate_help PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--svg FILE"
  FAIL_REGULAR_EXPRESSION "--schedule") # simulate compares every schedule: it does not list --schedule
add_test(NAME cli.help_check COMMAND dash-attn help check)
set_tests_properties(cli.help_check PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "usage: dash-attn check.*--device D"
  FAIL_REGULAR_EXPRESSION "--ctas|--svg")
add_test(NAME cli.help_check_exits_0 COMMAND dash-attn help check)
set_tests_properties(cli.help_check_exits_0 PROPERTIES LABELS cpu)
add_test(NAME cli.help_overview COMMAND dash-attn help)
set_tests_properties(cli.help_overview PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "commands:.*simulate .*check .*dash-attn help COMMAND")
add_test(NAME cli.help_unknown_command COMMAND dash-attn help bogus)
set_tests_properties(cli.help_unknown_command PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "help: unknown command 'bogus'")
# Each kind of argument mistake has its own message.
add_test(NAME cli.option_not_taken COMMAND dash-attn simulate --schedule shift)
set_tests_properties(cli.option_not_taken PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--schedule: not an option of `simulate` \\(it compares every schedule.*`plan` and `check` take --schedule\\)")
add_test(NAME cli.given_twice COMMAND dash-attn plan --seqlen 1024 --seqlen 2048)
set_tests_properties(cli.given_twice PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--seqlen: given twice")
add_test(NAME cli.unknown_option_suggests COMMAND dash-attn plan --head 4)
set_tests_properties(cli.unknown_option_suggests PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--head: unknown option; did you mean --heads\\?")
add_test(NAME cli.stray_argument COMMAND dash-attn plan 1024)
set_tests_properties(cli.stray_argument PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "stray argument '1024'")
# Errors from the core and the C ABI speak in flags, not field names.
add_test(NAME cli.window_in_flags COMMAND dash-attn plan --window -5,0)
set_tests_properties(cli.window_in_flags PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--window L: must be >= 0")
add_test(NAME cli.limits_in_flags COMMAND dash-attn simulate --seqlen 1500000 --heads 1)
set_tests_properties(cli.limits_in_flags PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--seqlen: 1500000 x --seqlen-k 1500000 gives" FAIL_REGULAR_EXPRESSION "seqlen_[qk]|head_dim")
# A tile shape is given whole, and never as 0 (which used to mean "the default" silently).
add_test(NAME cli.block_m_zero COMMAND dash-attn plan --block-m 0)
set_tests_properties(cli.block_m_zero PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--block-m: must be >= 1")
add_test(NAME cli.block_n_zero COMMAND dash-attn simulate --block-m 64 --block-n 0)
set_tests_properties(cli.block_n_zero PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "--block-n: must be >= 1")
add_test(NAME cli.block_m_alone COMMAND dash-attn plan --block-m 64)
set_tests_properties(cli.block_m_alone PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "give both --block-m and --block-n, or neither")
# --svg draws every CTA (132 lanes), with the critical path.
add_test(NAME cli.svg_every_cta COMMAND dash-attn simulate --seqlen 2048 --heads 4 --causal --svg cli_gantt.svg)
set_tests_properties(cli.svg_every_cta PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "wrote cli_gantt.svg \\(.*; 132 CTAs, one lane each\\)")
add_test(NAME cli.window_not_an_integer COMMAND dash-attn plan --window 256x,0 --seqlen 512 --heads 1)
set_tests_properties(cli.window_not_an_integer PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--window: expected two integers L,R, got '256x,0'")
# A varlen pack: its processing order and one template per sequence shape (a length-0 sequence gets none).
add_test(NAME cli.plan_varlen COMMAND dash-attn plan --varlen 300,1,129:200,0,77:5,300 --heads 4 --heads-kv 2 --causal
                                      --hdim 64)
set_tests_properties(cli.plan_varlen PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "6 sequences, 807 query / 806 key rows.*4 unit templates, 14 tickets.*no queries or no keys")
add_test(NAME cli.plan_varlen_bad COMMAND dash-attn plan --varlen 3,x)
set_tests_properties(cli.plan_varlen_bad PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--varlen: expected comma-separated lengths N or Q:K")
# The non-deterministic mode: no add waits for its turn (wait% 0.0), and the auto pick's makespan is printed.
add_test(NAME cli.simulate_nondeterministic COMMAND dash-attn simulate --seqlen 2048 --heads 4 --causal --nondeterministic)
set_tests_properties(cli.simulate_nondeterministic PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "ascending +[0-9.]+ +[0-9.]+ +0\\.0 .*auto picks [a-z-]+( [(]gqa [a-z]+[)])?, makespan [0-9.]+")
