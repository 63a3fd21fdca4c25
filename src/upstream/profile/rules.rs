//! Folding a sampled instruction into a component: rules on the symbol and the object it
//! lies in, first match wins.
//!
//! The built-in rules name what a reader of "would a faster parser help?" asks about
//! (`http_parser`, `regex`, `event_loop`, …). What no rule names takes the object's file
//! name (`webdis`, `libc.so.6`), so the code of a stripped binary still reads as the
//! server's own code rather than as "unknown".
//!
//! PHP frames ([`ComponentRules::php_component`]) go through the same rules: a user
//! rule's `symbol` against the function as PHP names it (`Amp\Http\Http1\Rfc7230::parseHeaders`),
//! its `object` against the defining script's path (`vendor/league/uri` groups a Composer
//! package); the built-in PHP rows name the parsers, event loops and stream layers of
//! Amphp, ReactPHP and Workerman. What no rule names takes its Composer package
//! (`vendor/NAME/PACKAGE/` in the path → `NAME/PACKAGE`), else the script's file name;
//! a function built into PHP (`strlen`) is [`PHP_BUILTIN_COMPONENT`].

use regex::Regex;

use super::ProfileError;

/// The object name given to samples in an anonymous executable mapping: code generated at
/// run time (PCRE2's JIT, in the servers we look at).
pub const ANON_EXEC_OBJECT: &str = "[anon-exec]";
/// The object name of kernel samples.
pub const KERNEL_OBJECT: &str = "[kernel]";
/// The catch-all component of kernel space.
pub const KERNEL_COMPONENT: &str = "kernel";
/// The component of a PHP function built into the interpreter that no rule names.
pub const PHP_BUILTIN_COMPONENT: &str = "php_builtin";
/// The component of Python's standard library that no rule names.
pub const PYTHON_STDLIB_COMPONENT: &str = "python_stdlib";

/// A rule from the configuration (`[[tap.process.component]]`): a sample belongs to
/// `name` when its symbol matches `symbol` and its object's file name matches `object`
/// (a missing regex matches anything; a rule with neither matches everything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserComponentRule {
    pub name: String,
    pub symbol: Option<String>,
    pub object: Option<String>,
}

/// Which address space a rule applies to: kernel function names like `tcp_sendmsg` must
/// not claim a user-space function that happens to share the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    Any,
    User,
    Kernel,
    /// PHP functions, as the interpreter names them.
    Php,
    /// Python functions: the code object's qualified name, the object its file's path.
    Python,
}

#[derive(Debug)]
struct Rule {
    name: String,
    space: Space,
    symbol: Option<Regex>,
    object: Option<Regex>,
}

impl Rule {
    fn matches(&self, symbol: &str, object: &str, space: Space) -> bool {
        let space = self.space == Space::Any || self.space == space;
        space
            && self.symbol.as_ref().is_none_or(|re| re.is_match(symbol))
            && self.object.as_ref().is_none_or(|re| re.is_match(object))
    }
}

/// The built-in rules, in order. Several rows may share a name: a component is found by
/// its symbols or, for a stripped shared library, by the library's file name.
const BUILT_IN: &[(&str, Space, Option<&str>, Option<&str>)] = &[
    // HTTP parsers: nodejs/http-parser, llhttp, picohttpparser.
    (
        "http_parser",
        Space::User,
        Some(r"^(http_parser_|llhttp_|llhttp__|phr_)"),
        None,
    ),
    (
        "http_parser",
        Space::User,
        None,
        Some(r"^lib(http_parser|llhttp|picohttpparser)\b"),
    ),
    // PCRE2 (and PCRE), PHP's binding of it, and the code its JIT generates.
    (
        "regex",
        Space::User,
        Some(r"^(pcre2?_|_pcre2?_|php_pcre_|zif_preg_)"),
        None,
    ),
    ("regex", Space::User, None, Some(r"^libpcre2?(-\d+)?\.so")),
    // Code compiled at run time that a runtime's perf map names (/tmp/perf-PID.map:
    // `node --perf-basic-prof`, a JVM's `jcmd PID Compiler.perfmap`): V8's compiled
    // regular expressions are regex, the rest the application's JavaScript or Java.
    // Without a name (PCRE2's JIT writes no map) it stays regex, below.
    (
        "regex",
        Space::User,
        Some(r"^RegExp:"),
        Some(r"^\[anon-exec\]$"),
    ),
    (
        "jit",
        Space::User,
        Some(r"^[^\[]"),
        Some(r"^\[anon-exec\]$"),
    ),
    // A runtime's JIT code without its perf map, named for what to start it with
    // (native/jit.rs): the application's code all the same.
    (
        "jit",
        Space::User,
        Some(r"^\[JIT code"),
        Some(r"^\[anon-exec\]$"),
    ),
    ("regex", Space::User, None, Some(r"^\[anon-exec\]$")),
    // hiredis.
    ("redis_client", Space::User, Some(r"^(redis|__redis)"), None),
    ("redis_client", Space::User, None, Some(r"^libhiredis")),
    // Event loops: libevent, libev, libuv, and epoll on both sides of the system call.
    (
        "event_loop",
        Space::User,
        Some(
            r"^(event_|evmap_|evthread_|evutil_|evsig_|evbuffer_|bufferevent_|epoll_dispatch|epoll_apply|ev_|uv_|uv__|epoll_wait$|epoll_pwait|epoll_ctl$)",
        ),
        None,
    ),
    (
        "event_loop",
        Space::User,
        None,
        Some(
            r"^lib(event|event_core|event_extra|event_pthreads)(-[\d.]+)?\.so|^libev\.so|^libuv\.so",
        ),
    ),
    (
        "event_loop",
        Space::Kernel,
        Some(
            r"^(ep_|do_epoll_|__x64_sys_epoll_|__ia32_sys_epoll_|__do_sys_epoll_|__se_sys_epoll_|sys_epoll_|epoll_)",
        ),
        None,
    ),
    // A JIT runtime's garbage collector and its compiler, on their own threads (V8's
    // `V8 Worker`s, HotSpot's `GC Thread#0`, `C2 CompilerThre…`) or on the application's
    // (a scavenge, a compile in the main thread): the runtime's cost of the code, not the
    // code. Known by their functions here; HotSpot's GC and compiler threads are also
    // known by their names, whatever function they run (native/thread_kind.rs), while
    // V8's workers run both and are known by function only.
    (
        "gc",
        Space::User,
        Some(
            r"^(v8::internal::(Heap::|Scavenger|ScavengerCollector|MarkCompactCollector|MinorMarkCompactCollector|MinorMarkSweepCollector|ConcurrentMarking|IncrementalMarking|MarkingVisitorBase|MainMarkingVisitor|ConcurrentMarkingVisitor|Sweeper|Evacuator|FullEvacuator|EvacuateVisitorBase|PointersUpdatingJob|MarkingWorklists|ArrayBufferSweeper|GCTracer)|cppgc::)",
        ),
        None,
    ),
    (
        "gc",
        Space::User,
        Some(
            r"^(G1|PSScavenge|PSPromotion|PSParallelCompact|ParallelScavengeHeap|Shenandoah|ZHeap|ZMark|ZRelocate|ZDriver|ZCollectedHeap|CardTable|DefNewGeneration|TenuredGeneration|SerialHeap|GenCollectedHeap|MarkSweep|ReferenceProcessor|WeakProcessor|HeapRegion|PLAB|OopOopIterate|GCTaskThread|WorkerThread::run|StringDedup)",
        ),
        Some(r"^libjvm\.so"),
    ),
    (
        "jit_compiler",
        Space::User,
        Some(
            r"^v8::internal::(compiler::|maglev::|baseline::|Compiler::|OptimizingCompileDispatcher|TurbofanCompilationJob|OptimizedCompilationJob)",
        ),
        None,
    ),
    (
        "jit_compiler",
        Space::User,
        Some(
            r"^(Compile::|C2Compiler|Compilation::|Compiler::|CompileBroker::|Phase[A-Z]|Matcher::|LinearScan|GraphBuilder|GraphKit|LIR_|Parse::|ciEnv|ciMethod|ciObject|ConnectionGraph|IdealLoopTree|SuperWord|MachNode|Node::|PhaseOutput)",
        ),
        Some(r"^libjvm\.so"),
    ),
    // The runtimes that run JIT-compiled code: V8 (its C++ and its builtins, inside
    // node's binary) and HotSpot's libjvm. What JavaScript or Java calls in them (Math.sin
    // is V8's ieee754::sin) is the caller's cost, as a C function's libm is.
    ("v8", Space::User, Some(r"^(v8::|Builtins_)"), None),
    ("jvm", Space::User, None, Some(r"^libjvm\.so")),
    // Allocators: glibc's malloc family, jemalloc, tcmalloc, mimalloc, and the Zend
    // memory manager (PHP's allocator).
    (
        "alloc",
        Space::User,
        Some(
            r"^(malloc|free|calloc|realloc|reallocarray|cfree|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|__libc_(malloc|free|calloc|realloc|memalign)|_int_(malloc|free|realloc|memalign)|_int_free_\w+|malloc_consolidate|sysmalloc|unlink_chunk|tcache_\w+|arena_get2|_e(malloc|free|realloc|calloc|strdup|strndup)(_\w+)?|zend_mm_\w+|je_\w+|tc_\w+|mi_\w+|_mi_\w+)$",
        ),
        None,
    ),
    (
        "alloc",
        Space::User,
        None,
        Some(r"^lib(jemalloc|tcmalloc|tcmalloc_minimal|mimalloc)\.so"),
    ),
    // The PHP engine: the Zend VM and its opcode handlers, and the runtime around it.
    (
        "php_engine",
        Space::User,
        Some(
            r"^(zend_|_zend_|ZEND_|execute_ex$|execute_internal$|zif_|zim_|php_|_php_|ZEND_\w+_HANDLER)",
        ),
        None,
    ),
    // The kernel's own code mapped into the process (the vDSO's clock reads, the legacy
    // vsyscall page): user-space addresses, but the kernel's code, not the server's, and
    // a bracketed mapping name read as a placeholder in the report.
    (
        KERNEL_COMPONENT,
        Space::User,
        None,
        Some(r"^\[(vdso|vsyscall)\]$"),
    ),
    // The kernel's network stack, and the system calls that enter it.
    (
        "kernel_network",
        Space::Kernel,
        Some(concat!(
            r"^(tcp_|tcp4_|tcp6_|__tcp_|udp_|__udp|sock_|__sock_|sk_|__sk_|skb_|__skb_|",
            r"kfree_skb|__kfree_skb|consume_skb|napi_consume_skb|alloc_skb|__alloc_skb|",
            r"inet_|__inet_|inet6_|ip_|__ip_|ip6_|ipv4_|ipv6_|raw_v|unix_|",
            r"net_rx_action|__netif_|netif_|napi_|__napi_|process_backlog|loopback_xmit|",
            r"dev_queue_xmit|__dev_queue_xmit|dev_hard_start_xmit|validate_xmit_skb|",
            r"neigh_|dst_release|nf_|__nf_|sch_direct_xmit|qdisc_|__qdisc_|pfifo_fast_|",
            r"release_sock|lock_sock|__release_sock|sockfd_lookup|security_socket_|",
            r"__sys_(send|recv|sendto|recvfrom|sendmsg|recvmsg|sendmmsg|recvmmsg|accept|accept4|connect|shutdown|socket|bind|listen|setsockopt|getsockopt)|",
            r"___sys_(sendmsg|recvmsg)|do_accept|",
            r"(__x64_|__ia32_|__do_|__se_)?sys_(send|recv|sendto|recvfrom|sendmsg|recvmsg|sendmmsg|recvmmsg|accept|accept4|connect|shutdown|socket|bind|listen|setsockopt|getsockopt)$)"
        )),
        None,
    ),
    // The rest of kernel space.
    (KERNEL_COMPONENT, Space::Kernel, None, None),
    // PHP: response-head writers, before the parsers' rule that would claim them by
    // class: amphp/http's Rfc7230 formats the response's head with the same class that
    // parses the request's (`formatHeaders`, `formatRawHeaders`). A faster request parser
    // changes nothing of them, and the what-if is about request parsing.
    (
        "response_head",
        Space::Php,
        Some(r"^(Amp\\Http\\Http1\\Rfc7230::|Amp\\Http\\Rfc7230::)format\w*$"),
        None,
    ),
    // PHP: request-head parsers. Amphp's HTTP/1 head parser (amphp/http's Rfc7230) and
    // the HTTP/1 driver's parsing, ReactPHP's header parser, Workerman's HTTP protocol.
    (
        "http_parser",
        Space::Php,
        Some(concat!(
            r"^(Amp\\Http\\Http1\\Rfc7230::|Amp\\Http\\Rfc7230::|",
            r"Amp\\Http\\Server\\Driver\\Http1Driver::(parser|parse\w*)$|",
            r"React\\Http\\Io\\RequestHeaderParser::|",
            r"Workerman\\Protocols\\Http(\\Request)?::(input|decode|parse\w*)$)"
        )),
        None,
    ),
    // PHP's PCRE functions.
    ("regex", Space::Php, Some(r"^preg_\w+$"), None),
    // Python: request-head parsers. http.server's request line and headers (which it
    // reads with http.client's header reader and email's feed parser), h11's readers,
    // gunicorn's request parser and its buffered reader. httptools is llhttp, named by
    // the native rows above.
    (
        "http_parser",
        Space::Python,
        Some(r"^(BaseHTTPRequestHandler\.parse_request|parse_headers|_read_headers)$"),
        Some(r"/http/(server|client)\.py$"),
    ),
    (
        "http_parser",
        Space::Python,
        None,
        Some(concat!(
            r"(/email/(feedparser|parser)\.py|/h11/_(readers|receivebuffer|abnf)\.py|",
            r"/gunicorn/http/(message|parser|unreader)\.py)$"
        )),
    ),
    // Event loops: Revolt (Amphp v3), Amp v2's loop, ReactPHP's, Workerman's, and the
    // waits they block in.
    (
        "event_loop",
        Space::Php,
        Some(
            r"^(Revolt\\EventLoop\\|Amp\\Loop(\\|::)|React\\EventLoop\\|Workerman\\Events\\|(stream_select|socket_select)$)",
        ),
        None,
    ),
    // Stream I/O: Amphp's byte streams and sockets, ReactPHP's, and PHP's stream calls.
    (
        "stream_io",
        Space::Php,
        Some(
            r"^(Amp\\ByteStream\\|Amp\\Socket\\|React\\Stream\\|React\\Socket\\|(fwrite|fread|fgets|fputs|fflush|fclose|stream_socket_\w+|stream_get_contents|stream_set_\w+|socket_(read|write|send|recv|sendto|recvfrom)\w*)$)",
        ),
        None,
    ),
];

/// Built-in rules and the configuration's rules, compiled; the configuration's come first.
#[derive(Debug)]
pub struct ComponentRules {
    rules: Vec<Rule>,
}

impl ComponentRules {
    /// User rules come first, then the built-ins; `symbol` and `object` are regexes.
    pub fn new(user: &[UserComponentRule]) -> Result<ComponentRules, ProfileError> {
        let compile = |name: &str, field: &'static str, pattern: &str| {
            Regex::new(pattern).map_err(|source| ProfileError::Rule {
                name: name.to_owned(),
                field,
                source: Box::new(source),
            })
        };
        let mut rules = Vec::with_capacity(user.len() + BUILT_IN.len());
        for rule in user {
            if rule.name.trim().is_empty() {
                return Err(ProfileError::RuleName);
            }
            rules.push(Rule {
                name: rule.name.clone(),
                space: Space::Any,
                symbol: rule
                    .symbol
                    .as_deref()
                    .map(|p| compile(&rule.name, "symbol", p))
                    .transpose()?,
                object: rule
                    .object
                    .as_deref()
                    .map(|p| compile(&rule.name, "object", p))
                    .transpose()?,
            });
        }
        for &(name, space, symbol, object) in BUILT_IN {
            rules.push(Rule {
                name: name.to_owned(),
                space,
                symbol: symbol.map(|p| compile(name, "symbol", p)).transpose()?,
                object: object.map(|p| compile(name, "object", p)).transpose()?,
            });
        }
        Ok(ComponentRules { rules })
    }

    /// The component of an instruction in `symbol` (empty when unknown) of `object` (the
    /// file name of its mapping, [`ANON_EXEC_OBJECT`] or [`KERNEL_OBJECT`]).
    pub fn component<'a>(&'a self, symbol: &str, object: &'a str, kernel: bool) -> &'a str {
        let space = if kernel { Space::Kernel } else { Space::User };
        self.rules
            .iter()
            .find(|rule| rule.matches(symbol, object, space))
            .map_or(object, |rule| rule.name.as_str())
    }

    /// The component of a PHP function (`Class::method`, `{closure}`, `strlen`) defined in
    /// `file` (empty for a function built into PHP).
    pub fn php_component(&self, function: &str, file: &str) -> String {
        if let Some(rule) = self
            .rules
            .iter()
            .find(|rule| rule.matches(function, file, Space::Php))
        {
            return rule.name.clone();
        }
        if file.is_empty() {
            return PHP_BUILTIN_COMPONENT.to_owned();
        }
        if let Some(rest) = file.split("/vendor/").nth(1) {
            let mut parts = rest.splitn(3, '/');
            if let (Some(vendor), Some(package), Some(_)) =
                (parts.next(), parts.next(), parts.next())
            {
                return format!("{vendor}/{package}");
            }
        }
        file.rsplit('/').next().unwrap_or(file).to_owned()
    }
}

impl ComponentRules {
    /// The component of a Python function (`Class.method`, `<module>`) defined in `file`:
    /// a rule's, else its package (`…/site-packages/NAME/…` or `dist-packages`, a module
    /// file `NAME.py` there), else [`PYTHON_STDLIB_COMPONENT`] for the standard library
    /// (`…/lib/python3.X/…`, frozen modules), else the file's name (the server's own).
    pub fn python_component(&self, function: &str, file: &str) -> String {
        if let Some(rule) = self
            .rules
            .iter()
            .find(|rule| rule.matches(function, file, Space::Python))
        {
            return rule.name.clone();
        }
        for packages in ["/site-packages/", "/dist-packages/"] {
            if let Some(rest) = file.split(packages).nth(1) {
                let first = rest.split('/').next().unwrap_or(rest);
                return first.strip_suffix(".py").unwrap_or(first).to_owned();
            }
        }
        let stdlib = file.starts_with("<frozen ")
            || file
                .split('/')
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0] == "lib" && w[1].starts_with("python3"));
        if stdlib {
            return PYTHON_STDLIB_COMPONENT.to_owned();
        }
        file.rsplit('/').next().unwrap_or(file).to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::components::{component_label, LABELS};

    fn rules() -> ComponentRules {
        ComponentRules::new(&[]).unwrap()
    }

    #[test]
    fn every_label_names_a_built_in_rule() {
        for (name, _) in LABELS {
            assert!(
                BUILT_IN.iter().any(|(rule, ..)| rule == name),
                "{name} has a label but no built-in rule"
            );
        }
        assert_eq!(component_label("http_parser"), "HTTP parser");
        assert_eq!(component_label("webdis"), "webdis");
    }

    #[test]
    fn built_in_table() {
        let rules = rules();
        // (symbol, object, kernel, expected component)
        let table: &[(&str, &str, bool, &str)] = &[
            ("http_parser_execute", "webdis", false, "http_parser"),
            ("llhttp_execute", "node", false, "http_parser"),
            ("llhttp__internal__run", "node", false, "http_parser"),
            ("phr_parse_request", "h2o", false, "http_parser"),
            ("", "libllhttp.so.9.1", false, "http_parser"),
            ("pcre2_match_8", "libpcre2-8.so.0", false, "regex"),
            ("", "libpcre2-8.so.0", false, "regex"),
            ("php_pcre_match_impl", "php8.4", false, "regex"),
            ("", ANON_EXEC_OBJECT, false, "regex"),
            (ANON_EXEC_OBJECT, ANON_EXEC_OBJECT, false, "regex"),
            (
                "JS:*computeReport /srv/server.js:3:23",
                ANON_EXEC_OBJECT,
                false,
                "jit",
            ),
            ("RegExp:^/api/", ANON_EXEC_OBJECT, false, "regex"),
            (
                "[JIT code: no perf map; start node with --perf-basic-prof]",
                ANON_EXEC_OBJECT,
                false,
                "jit",
            ),
            (
                "Lcom/example/Handler;::handle",
                ANON_EXEC_OBJECT,
                false,
                "jit",
            ),
            (
                "redisAsyncHandleRead",
                "libhiredis.so.0.14",
                false,
                "redis_client",
            ),
            ("redisReaderFeed", "webdis", false, "redis_client"),
            ("", "libhiredis.so.1.1.0", false, "redis_client"),
            ("v8::base::ieee754::sin(double)", "node", false, "v8"),
            ("Builtins_JSEntryTrampoline", "node", false, "v8"),
            (
                "node::(anonymous namespace)::Parser::OnStreamRead",
                "node",
                false,
                "node",
            ),
            ("JVM_Sleep", "libjvm.so", false, "jvm"),
            (
                "G1ParScanThreadState::trim_queue_to_threshold(unsigned int)",
                "libjvm.so",
                false,
                "gc",
            ),
            (
                "PhaseChaitin::Split(unsigned int, ResourceArea*)",
                "libjvm.so",
                false,
                "jit_compiler",
            ),
            (
                "Compilation::compile_method()",
                "libjvm.so",
                false,
                "jit_compiler",
            ),
            ("Thread::call_run()", "libjvm.so", false, "jvm"),
            (
                "v8::internal::Scavenger::ScavengePage(v8::internal::MemoryChunk*)",
                "node",
                false,
                "gc",
            ),
            ("cppgc::internal::MarkerBase::AdvanceMarkingWithLimits", "node", false, "gc"),
            (
                "v8::internal::compiler::PipelineImpl::OptimizeGraph(v8::internal::compiler::Linkage*)",
                "node",
                false,
                "jit_compiler",
            ),
            (
                "v8::internal::Isolate::Init(v8::internal::SnapshotData*)",
                "node",
                false,
                "v8",
            ),
            ("G1Something", "libother.so", false, "libother.so"),
            ("event_base_loop", "libevent-2.1.so.7", false, "event_loop"),
            ("evmap_io_active_", "libevent-2.1.so.7", false, "event_loop"),
            ("", "libevent-2.1.so.7", false, "event_loop"),
            ("ev_run", "libev.so.4", false, "event_loop"),
            ("uv_run", "node", false, "event_loop"),
            ("uv__io_poll", "node", false, "event_loop"),
            ("epoll_wait", "libc.so.6", false, "event_loop"),
            ("ep_poll", KERNEL_OBJECT, true, "event_loop"),
            ("do_epoll_wait", KERNEL_OBJECT, true, "event_loop"),
            ("malloc", "libc.so.6", false, "alloc"),
            ("_int_malloc", "libc.so.6", false, "alloc"),
            ("cfree", "libc.so.6", false, "alloc"),
            ("__libc_calloc", "libc.so.6", false, "alloc"),
            ("_emalloc_56", "php8.4", false, "alloc"),
            ("zend_mm_alloc_pages", "php8.4", false, "alloc"),
            ("je_malloc", "libjemalloc.so.2", false, "alloc"),
            ("", "libjemalloc.so.2", false, "alloc"),
            ("malloc_trim_helper", "app", false, "app"),
            ("zend_hash_find", "php8.4", false, "php_engine"),
            ("execute_ex", "php8.4", false, "php_engine"),
            (
                "ZEND_DO_ICALL_SPEC_RETVAL_USED_HANDLER",
                "php8.4",
                false,
                "php_engine",
            ),
            ("tcp_sendmsg", KERNEL_OBJECT, true, "kernel_network"),
            ("tcp_recvmsg_locked", KERNEL_OBJECT, true, "kernel_network"),
            ("sock_read_iter", KERNEL_OBJECT, true, "kernel_network"),
            ("__sys_recvfrom", KERNEL_OBJECT, true, "kernel_network"),
            ("__x64_sys_sendto", KERNEL_OBJECT, true, "kernel_network"),
            ("ip_finish_output2", KERNEL_OBJECT, true, "kernel_network"),
            (
                "__netif_receive_skb_one_core",
                KERNEL_OBJECT,
                true,
                "kernel_network",
            ),
            (
                "skb_copy_datagram_iter",
                KERNEL_OBJECT,
                true,
                "kernel_network",
            ),
            ("inet_recvmsg", KERNEL_OBJECT, true, "kernel_network"),
            ("loopback_xmit", KERNEL_OBJECT, true, "kernel_network"),
            ("schedule", KERNEL_OBJECT, true, "kernel"),
            ("__x64_sys_write", KERNEL_OBJECT, true, "kernel"),
            ("copy_user_generic_string", KERNEL_OBJECT, true, "kernel"),
            ("", KERNEL_OBJECT, true, "kernel"),
            ("__vdso_clock_gettime", "[vdso]", false, "kernel"),
            ("", "[vsyscall]", false, "kernel"),
            // Kernel-only prefixes do not claim user-space functions.
            ("tcp_connect_retry", "myserver", false, "myserver"),
            ("sock_helper", "libfoo.so.1", false, "libfoo.so.1"),
            // What no rule names: the object's file name.
            ("backend_query", "burn-upstream", false, "burn-upstream"),
            ("", "webdis", false, "webdis"),
            ("memcpy", "libc.so.6", false, "libc.so.6"),
            (
                "__memmove_avx_unaligned_erms",
                "libc.so.6",
                false,
                "libc.so.6",
            ),
            ("json_dumps", "libjansson.so.4", false, "libjansson.so.4"),
        ];
        for &(symbol, object, kernel, expected) in table {
            assert_eq!(
                rules.component(symbol, object, kernel),
                expected,
                "symbol {symbol:?} in {object:?} (kernel: {kernel})"
            );
        }
    }

    #[test]
    fn php_frames() {
        let rules = ComponentRules::new(&[UserComponentRule {
            name: "uri".into(),
            symbol: None,
            object: Some("vendor/league/uri".into()),
        }])
        .unwrap();
        // (function, file, expected component)
        let table: &[(&str, &str, &str)] = &[
            (
                r"Amp\Http\Http1\Rfc7230::parseHeaderPairs",
                "/srv/vendor/amphp/http/src/Http1/Rfc7230.php",
                "http_parser",
            ),
            (
                r"Amp\Http\Server\Driver\Http1Driver::parser",
                "/srv/vendor/amphp/http-server/src/Driver/Http1Driver.php",
                "http_parser",
            ),
            (
                r"Amp\Http\Server\Driver\Http1Driver::write",
                "/srv/vendor/amphp/http-server/src/Driver/Http1Driver.php",
                "amphp/http-server",
            ),
            (
                r"Amp\Http\Http1\Rfc7230::formatHeaders",
                "/srv/vendor/amphp/http/src/Http1/Rfc7230.php",
                "response_head",
            ),
            (
                r"Amp\Http\Rfc7230::formatRawHeaders",
                "/usr/share/php/Amp/Http/Rfc7230.php",
                "response_head",
            ),
            (
                r"Amp\Http\Http1\Rfc7230::parseHeaders",
                "/srv/vendor/amphp/http/src/Http1/Rfc7230.php",
                "http_parser",
            ),
            ("preg_match", "", "regex"),
            (
                r"Revolt\EventLoop\Driver\StreamSelectDriver::dispatch",
                "/srv/vendor/revolt/event-loop/src/EventLoop/Driver/StreamSelectDriver.php",
                "event_loop",
            ),
            (
                r"Amp\Loop::run",
                "/usr/share/php/Amp/Loop.php",
                "event_loop",
            ),
            ("stream_select", "", "event_loop"),
            (
                r"Amp\ByteStream\ResourceStream::write",
                "/srv/vendor/amphp/byte-stream/src/ResourceStream.php",
                "stream_io",
            ),
            ("fwrite", "", "stream_io"),
            ("strlen", "", PHP_BUILTIN_COMPONENT),
            (
                r"League\Uri\Uri::new",
                "/srv/vendor/league/uri/Uri.php",
                "uri",
            ),
            ("{closure}", "/srv/public/index.php", "index.php"),
            // A native rule never claims a PHP function of the same name.
            ("php_pcre_match_impl", "/srv/x.php", "x.php"),
        ];
        for &(function, file, expected) in table {
            assert_eq!(
                rules.php_component(function, file),
                expected,
                "{function} in {file:?}"
            );
        }
    }

    #[test]
    fn user_rules_come_first() {
        let rules = ComponentRules::new(&[
            UserComponentRule {
                name: "routing".into(),
                symbol: Some("^http_parser_execute$".into()),
                object: Some("^webdis$".into()),
            },
            UserComponentRule {
                name: "json".into(),
                symbol: None,
                object: Some("^libjansson".into()),
            },
        ])
        .unwrap();
        assert_eq!(
            rules.component("http_parser_execute", "webdis", false),
            "routing"
        );
        // Both regexes must match: the same symbol elsewhere falls through to the built-ins.
        assert_eq!(
            rules.component("http_parser_execute", "other", false),
            "http_parser"
        );
        assert_eq!(
            rules.component("json_dumps", "libjansson.so.4", false),
            "json"
        );
        assert_eq!(rules.component("memcpy", "libc.so.6", false), "libc.so.6");
    }

    #[test]
    fn bad_user_rules_are_refused_with_their_name() {
        let error = ComponentRules::new(&[UserComponentRule {
            name: "broken".into(),
            symbol: Some("(unclosed".into()),
            object: None,
        }])
        .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("broken") && text.contains("symbol"), "{text}");
        assert!(matches!(
            ComponentRules::new(&[UserComponentRule {
                name: " ".into(),
                symbol: None,
                object: None,
            }]),
            Err(ProfileError::RuleName)
        ));
    }

    #[test]
    fn python_frames() {
        let rules = rules();
        // (function, file, expected component)
        let table: &[(&str, &str, &str)] = &[
            (
                "BaseHTTPRequestHandler.parse_request",
                "/usr/lib/python3.11/http/server.py",
                "http_parser",
            ),
            (
                "parse_headers",
                "/usr/lib/python3.11/http/client.py",
                "http_parser",
            ),
            (
                "FeedParser.feed",
                "/usr/lib/python3.11/email/feedparser.py",
                "http_parser",
            ),
            (
                "Request.parse",
                "/usr/lib/python3/dist-packages/gunicorn/http/message.py",
                "http_parser",
            ),
            (
                "_obsolete_line_fold",
                "/srv/venv/lib/python3.11/site-packages/h11/_readers.py",
                "http_parser",
            ),
            (
                "Connection.send",
                "/srv/venv/lib/python3.11/site-packages/h11/_connection.py",
                "h11",
            ),
            (
                "Arbiter.run",
                "/usr/lib/python3/dist-packages/gunicorn/arbiter.py",
                "gunicorn",
            ),
            (
                "urlencode",
                "/srv/venv/lib/python3.11/site-packages/six.py",
                "six",
            ),
            (
                "BaseHTTPRequestHandler.send_response",
                "/usr/lib/python3.11/http/server.py",
                PYTHON_STDLIB_COMPONENT,
            ),
            (
                "_find_and_load",
                "<frozen importlib._bootstrap>",
                PYTHON_STDLIB_COMPONENT,
            ),
            ("compute_report", "/srv/app/views.py", "views.py"),
        ];
        for &(function, file, expected) in table {
            assert_eq!(
                rules.python_component(function, file),
                expected,
                "{function} in {file}"
            );
        }
    }
}
