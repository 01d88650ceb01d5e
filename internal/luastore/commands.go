package luastore

import (
	"strings"
)

// The command table and its dispatch: what redis.call and redis.pcall run.
// Each command takes its arguments as Redis does (args[0] is its name) and
// returns a reply (reply.go). Its arity is checked here, Redis's way:
// n exactly n arguments (the name included), -n at least n.

type command struct {
	arity int
	write bool
	run   func(s *Store, args []string) any
}

var commands map[string]*command

func init() {
	commands = map[string]*command{
		// Keys and strings (strings.go).
		"GET":       {2, false, cmdGet},
		"SET":       {-3, true, cmdSet},
		"INCR":      {2, true, cmdIncr},
		"INCRBY":    {3, true, cmdIncrBy},
		"DEL":       {-2, true, cmdDel},
		"EXISTS":    {-2, false, cmdExists},
		"TYPE":      {2, false, cmdType},
		"PTTL":      {2, false, cmdPTTL},
		"TTL":       {2, false, cmdTTL},
		"PEXPIRE":   {-3, true, cmdPExpire},
		"EXPIRE":    {-3, true, cmdExpire},
		"PEXPIREAT": {-3, true, cmdPExpireAt},
		"TIME":      {1, false, cmdTime},
		// Hashes (hash.go).
		"HSET":    {-4, true, cmdHSet},
		"HGET":    {3, false, cmdHGet},
		"HMGET":   {-3, false, cmdHMGet},
		"HDEL":    {-3, true, cmdHDel},
		"HGETALL": {2, false, cmdHGetAll},
		// Sorted sets (zset.go, zsetcmd.go).
		"ZADD":             {-4, true, cmdZAdd},
		"ZCARD":            {2, false, cmdZCard},
		"ZCOUNT":           {4, false, cmdZCount},
		"ZSCORE":           {3, false, cmdZScore},
		"ZREM":             {-3, true, cmdZRem},
		"ZRANGE":           {-4, false, cmdZRange},
		"ZRANGEBYSCORE":    {-4, false, cmdZRangeByScore},
		"ZREMRANGEBYSCORE": {4, true, cmdZRemRangeByScore},
		// Lists (list.go).
		"LPUSH":  {-3, true, cmdLPush},
		"LTRIM":  {4, true, cmdLTrim},
		"LRANGE": {4, false, cmdLRange},
		"LLEN":   {2, false, cmdLLen},
	}
}

// Errors of a call from a script, before its command runs (Redis's text).
const (
	errNoArgs      = Error("ERR Please specify at least one argument for this redis lib call")
	errBadArgType  = Error("ERR Lua redis lib command arguments must be strings or integers")
	errUnknownCmd  = Error("ERR Unknown Redis command called from script")
	errArity       = Error("ERR Wrong number of args calling Redis command from script")
	errWriteInRO   = Error("ERR Write commands are not allowed from read-only scripts.")
	errUnsupported = "ERR luastore does not implement the command "
)

// knownCommands are commands Redis has that this store does not: a script
// calling one learns so, rather than that Redis does not know it.
var knownCommands = []string{"APPEND", "DECR", "DECRBY", "EXPIREAT", "GETDEL", "GETEX", "GETSET", "HEXISTS", "HINCRBY", "HKEYS", "HLEN", "HSETNX", "HVALS", "INCRBYFLOAT", "LINDEX", "LPOP", "LREM", "LSET", "MGET", "MSET", "PERSIST", "PEXPIRETIME", "RPOP", "RPUSH", "SADD", "SCARD", "SISMEMBER", "SMEMBERS", "SREM", "STRLEN", "ZINCRBY", "ZRANK", "ZREMRANGEBYRANK", "ZREVRANGE", "ZREVRANGEBYSCORE", "ZSCAN", "SCAN", "KEYS", "UNLINK"}

// exec runs one command for a script; readOnly refuses writes (EVAL_RO).
func (s *Store) exec(args []string, readOnly bool) any {
	c := commands[args[0]]
	if c == nil {
		name := strings.ToUpper(args[0])
		if c = commands[name]; c == nil {
			for _, k := range knownCommands {
				if k == name {
					return Error(errUnsupported + name)
				}
			}
			return errUnknownCmd
		}
	}
	if (c.arity > 0 && len(args) != c.arity) || (c.arity < 0 && len(args) < -c.arity) {
		return errArity
	}
	if readOnly && c.write {
		return errWriteInRO
	}
	return c.run(s, args)
}

// arityError is the error a command gives when its own count of arguments
// is wrong (HSET with a field and no value).
func arityError(name string) Error {
	return Error("ERR wrong number of arguments for '" + strings.ToLower(name) + "' command")
}
