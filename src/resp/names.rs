//! The bounded table of known Redis command names.
//!
//! A route label per command name must stay bounded however many distinct names clients
//! invent, so only names in this table get their own label; anything else is `other`.
//! The table is Redis 7.0's `COMMAND LIST` (top-level commands; subcommands such as
//! `CONFIG GET` share their container's name) plus the commands Redis 7.2 and 7.4 added.

use std::cmp::Ordering;

/// Known command names, upper case, sorted bytewise so that lookup is a binary search.
static COMMANDS: &[&str] = &[
    "ACL",
    "APPEND",
    "ASKING",
    "AUTH",
    "BGREWRITEAOF",
    "BGSAVE",
    "BITCOUNT",
    "BITFIELD",
    "BITFIELD_RO",
    "BITOP",
    "BITPOS",
    "BLMOVE",
    "BLMPOP",
    "BLPOP",
    "BRPOP",
    "BRPOPLPUSH",
    "BZMPOP",
    "BZPOPMAX",
    "BZPOPMIN",
    "CLIENT",
    "CLUSTER",
    "COMMAND",
    "CONFIG",
    "COPY",
    "DBSIZE",
    "DEBUG",
    "DECR",
    "DECRBY",
    "DEL",
    "DISCARD",
    "DUMP",
    "ECHO",
    "EVAL",
    "EVALSHA",
    "EVALSHA_RO",
    "EVAL_RO",
    "EXEC",
    "EXISTS",
    "EXPIRE",
    "EXPIREAT",
    "EXPIRETIME",
    "FAILOVER",
    "FCALL",
    "FCALL_RO",
    "FLUSHALL",
    "FLUSHDB",
    "FUNCTION",
    "GEOADD",
    "GEODIST",
    "GEOHASH",
    "GEOPOS",
    "GEORADIUS",
    "GEORADIUSBYMEMBER",
    "GEORADIUSBYMEMBER_RO",
    "GEORADIUS_RO",
    "GEOSEARCH",
    "GEOSEARCHSTORE",
    "GET",
    "GETBIT",
    "GETDEL",
    "GETEX",
    "GETRANGE",
    "GETSET",
    "HDEL",
    "HELLO",
    "HEXISTS",
    "HEXPIRE",
    "HEXPIREAT",
    "HEXPIRETIME",
    "HGET",
    "HGETALL",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HMSET",
    "HPERSIST",
    "HPEXPIRE",
    "HPEXPIREAT",
    "HPEXPIRETIME",
    "HPTTL",
    "HRANDFIELD",
    "HSCAN",
    "HSET",
    "HSETNX",
    "HSTRLEN",
    "HTTL",
    "HVALS",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "INFO",
    "KEYS",
    "LASTSAVE",
    "LATENCY",
    "LCS",
    "LINDEX",
    "LINSERT",
    "LLEN",
    "LMOVE",
    "LMPOP",
    "LOLWUT",
    "LPOP",
    "LPOS",
    "LPUSH",
    "LPUSHX",
    "LRANGE",
    "LREM",
    "LSET",
    "LTRIM",
    "MEMORY",
    "MGET",
    "MIGRATE",
    "MODULE",
    "MONITOR",
    "MOVE",
    "MSET",
    "MSETNX",
    "MULTI",
    "OBJECT",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PEXPIRETIME",
    "PFADD",
    "PFCOUNT",
    "PFDEBUG",
    "PFMERGE",
    "PFSELFTEST",
    "PING",
    "PSETEX",
    "PSUBSCRIBE",
    "PSYNC",
    "PTTL",
    "PUBLISH",
    "PUBSUB",
    "PUNSUBSCRIBE",
    "QUIT",
    "RANDOMKEY",
    "READONLY",
    "READWRITE",
    "RENAME",
    "RENAMENX",
    "REPLCONF",
    "REPLICAOF",
    "RESET",
    "RESTORE",
    "RESTORE-ASKING",
    "ROLE",
    "RPOP",
    "RPOPLPUSH",
    "RPUSH",
    "RPUSHX",
    "SADD",
    "SAVE",
    "SCAN",
    "SCARD",
    "SCRIPT",
    "SDIFF",
    "SDIFFSTORE",
    "SELECT",
    "SET",
    "SETBIT",
    "SETEX",
    "SETNX",
    "SETRANGE",
    "SHUTDOWN",
    "SINTER",
    "SINTERCARD",
    "SINTERSTORE",
    "SISMEMBER",
    "SLAVEOF",
    "SLOWLOG",
    "SMEMBERS",
    "SMISMEMBER",
    "SMOVE",
    "SORT",
    "SORT_RO",
    "SPOP",
    "SPUBLISH",
    "SRANDMEMBER",
    "SREM",
    "SSCAN",
    "SSUBSCRIBE",
    "STRLEN",
    "SUBSCRIBE",
    "SUBSTR",
    "SUNION",
    "SUNIONSTORE",
    "SUNSUBSCRIBE",
    "SWAPDB",
    "SYNC",
    "TIME",
    "TOUCH",
    "TTL",
    "TYPE",
    "UNLINK",
    "UNSUBSCRIBE",
    "UNWATCH",
    "WAIT",
    "WAITAOF",
    "WATCH",
    "XACK",
    "XADD",
    "XAUTOCLAIM",
    "XCLAIM",
    "XDEL",
    "XGROUP",
    "XINFO",
    "XLEN",
    "XPENDING",
    "XRANGE",
    "XREAD",
    "XREADGROUP",
    "XREVRANGE",
    "XSETID",
    "XTRIM",
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZDIFF",
    "ZDIFFSTORE",
    "ZINCRBY",
    "ZINTER",
    "ZINTERCARD",
    "ZINTERSTORE",
    "ZLEXCOUNT",
    "ZMPOP",
    "ZMSCORE",
    "ZPOPMAX",
    "ZPOPMIN",
    "ZRANDMEMBER",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZRANGEBYSCORE",
    "ZRANGESTORE",
    "ZRANK",
    "ZREM",
    "ZREMRANGEBYLEX",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREVRANGE",
    "ZREVRANGEBYLEX",
    "ZREVRANGEBYSCORE",
    "ZREVRANK",
    "ZSCAN",
    "ZSCORE",
    "ZUNION",
    "ZUNIONSTORE",
];

/// The longest name in the table; longer names are unknown without a search.
const LONGEST: usize = 32;

/// The canonical (upper-case) name of a known Redis command, matched without regard to
/// ASCII case; `None` for any other name.
pub fn known_command(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() || name.len() > LONGEST {
        return None;
    }
    COMMANDS
        .binary_search_by(|probe| cmp_upper(probe.as_bytes(), name))
        .ok()
        .map(|i| COMMANDS[i])
}

/// Every known command name, upper case and sorted: the route labels a RESP tap can have
/// besides `other`.
pub fn command_names() -> &'static [&'static str] {
    COMMANDS
}

/// Compares an upper-case table entry with a name in any case.
fn cmp_upper(entry: &[u8], name: &[u8]) -> Ordering {
    for (e, n) in entry.iter().zip(name) {
        match e.cmp(&n.to_ascii_uppercase()) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    entry.len().cmp(&name.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_unique_and_upper_case() {
        for pair in COMMANDS.windows(2) {
            assert!(
                pair[0] < pair[1],
                "{} must sort before {}",
                pair[0],
                pair[1]
            );
        }
        for name in COMMANDS {
            assert!(!name.is_empty() && name.len() <= LONGEST, "{name}");
            assert!(
                name.bytes()
                    .all(|b| !b.is_ascii_lowercase() && b.is_ascii_graphic()),
                "{name}"
            );
        }
    }

    #[test]
    fn every_entry_is_found_in_any_case() {
        for name in COMMANDS {
            assert_eq!(known_command(name.as_bytes()), Some(*name));
            let lower = name.to_ascii_lowercase();
            assert_eq!(known_command(lower.as_bytes()), Some(*name));
        }
    }

    #[test]
    fn redis_benchmark_commands_are_known() {
        // What `redis-benchmark -t` exercises, plus the commands Webdis sends on its own.
        for name in [
            "ping",
            "set",
            "get",
            "incr",
            "lpush",
            "rpush",
            "lpop",
            "rpop",
            "sadd",
            "hset",
            "spop",
            "zadd",
            "zpopmin",
            "lrange",
            "mset",
            "xadd",
            "select",
            "auth",
            "subscribe",
            "psubscribe",
            "unsubscribe",
            "punsubscribe",
            "ssubscribe",
            "sunsubscribe",
            "monitor",
            "hello",
            "quit",
            "reset",
            "client",
            "info",
            "del",
            "exists",
            "expire",
            "eval",
            "evalsha",
            "multi",
            "exec",
            "hgetall",
            "smembers",
            "zrange",
            "scan",
        ] {
            assert!(
                known_command(name.as_bytes()).is_some(),
                "{name} must be known"
            );
        }
    }

    #[test]
    fn unknown_names_are_not_known() {
        for name in [
            &b""[..],
            b"GETT",
            b"GE",
            b"SET ",
            b"FOO",
            b"CONFIG GET",
            b"\xffSET",
            &[b'A'; 200],
        ] {
            assert_eq!(
                known_command(name),
                None,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn the_table_holds_redis_7_0() {
        // COMMAND COUNT on redis-server 7.0 is 240; the table adds what 7.2 and 7.4 brought.
        assert!(COMMANDS.len() >= 240, "{}", COMMANDS.len());
    }
}
