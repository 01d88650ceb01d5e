package luastore

import (
	"testing"
)

// scriptCase is a script run on Redis and on a Store, KEYS being three
// keys of its own: the replies and errors must be the same.
type scriptCase struct {
	name  string
	setup string // run first on both sides, its reply ignored
	src   string
	args  []any
	// firstWord: compare only the first word of errors (Lua's wording of
	// runtime errors is gopher-lua's).
	firstWord bool
}

// runCases runs cases on a pair, each on keys of its own.
func runCases(t *testing.T, p *pair, cases []scriptCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys := p.keys(c.name+":1", c.name+":2", c.name+":3")
			if c.setup != "" {
				r, s := p.eval(t, c.setup, keys)
				if d := same(r, s, false); d != "" {
					t.Fatalf("setup %q: %s", c.setup, d)
				}
			}
			r, s := p.eval(t, c.src, keys, c.args...)
			if d := same(r, s, c.firstWord); d != "" {
				t.Errorf("Eval(%q, %q) differs: %s", c.src, c.args, d)
			}
		})
	}
}

const (
	setString = "redis.call('SET', KEYS[1], 'v')"
	setHash   = "redis.call('HSET', KEYS[1], 'f', 'v')"
	setZSet   = "redis.call('ZADD', KEYS[1], 1, 'm')"
	setList   = "redis.call('LPUSH', KEYS[1], 'x')"
	setNumber = "redis.call('SET', KEYS[1], '10')"
)

func TestStringCommands(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "get missing", src: "return redis.call('GET', KEYS[1])"},
		{name: "get", setup: setString, src: "return redis.call('GET', KEYS[1])"},
		{name: "get wrongtype", setup: setHash, src: "return redis.call('GET', KEYS[1])"},
		{name: "get pcall wrongtype", setup: setHash, src: "return redis.pcall('GET', KEYS[1])"},
		{name: "get type of wrongtype", setup: setHash, src: "local r = redis.pcall('GET', KEYS[1]) return {type(r), r.err}"},
		{name: "set", src: "return redis.call('SET', KEYS[1], 'v')"},
		{name: "set ok field", src: "return redis.call('SET', KEYS[1], 'v').ok"},
		{name: "set then get", src: "redis.call('SET', KEYS[1], 'v') return redis.call('GET', KEYS[1])"},
		{name: "set nx missing", src: "return redis.call('SET', KEYS[1], 'w', 'NX')"},
		{name: "set nx existing", setup: setString, src: "return {redis.call('SET', KEYS[1], 'w', 'NX'), redis.call('GET', KEYS[1])}"},
		{name: "set nx false", setup: setString, src: "return tostring(redis.call('SET', KEYS[1], 'w', 'nx'))"},
		{name: "set xx missing", src: "return {redis.call('SET', KEYS[1], 'w', 'XX'), redis.call('EXISTS', KEYS[1])}"},
		{name: "set xx existing", setup: setString, src: "return {redis.call('SET', KEYS[1], 'w', 'XX'), redis.call('GET', KEYS[1])}"},
		{name: "set get existing", setup: setString, src: "return {redis.call('SET', KEYS[1], 'w', 'GET'), redis.call('GET', KEYS[1])}"},
		{name: "set get missing", src: "return {redis.call('SET', KEYS[1], 'w', 'GET'), redis.call('GET', KEYS[1])}"},
		{name: "set get nx existing", setup: setString, src: "return {redis.call('SET', KEYS[1], 'w', 'NX', 'GET'), redis.call('GET', KEYS[1])}"},
		{name: "set get wrongtype", setup: setHash, src: "return redis.call('SET', KEYS[1], 'w', 'GET')"},
		{name: "set over hash", setup: setHash, src: "redis.call('SET', KEYS[1], 'w') return {redis.call('TYPE', KEYS[1]).ok, redis.call('GET', KEYS[1])}"},
		{name: "set px", src: "redis.call('SET', KEYS[1], 'v', 'PX', 100000) local t = redis.call('PTTL', KEYS[1]) return {t > 99000, t <= 100000}"},
		{name: "set ex", src: "redis.call('SET', KEYS[1], 'v', 'EX', 100) local t = redis.call('PTTL', KEYS[1]) return {t > 99000, t <= 100000}"},
		{name: "set px number", src: "redis.call('SET', KEYS[1], 'v', 'px', 100000) return redis.call('PTTL', KEYS[1]) > 0"},
		{name: "set exat", src: "local now = tonumber(redis.call('TIME')[1]) redis.call('SET', KEYS[1], 'v', 'EXAT', now + 100) local t = redis.call('PTTL', KEYS[1]) return {t > 98000, t <= 100000}"},
		{name: "set pxat", src: "local tm = redis.call('TIME') local now = tm[1] * 1000 + math.floor(tm[2] / 1000) redis.call('SET', KEYS[1], 'v', 'PXAT', now + 100000) local t = redis.call('PTTL', KEYS[1]) return {t > 99000, t <= 100000}"},
		{name: "set keepttl", setup: "redis.call('SET', KEYS[1], 'v', 'PX', 100000)", src: "redis.call('SET', KEYS[1], 'w', 'KEEPTTL') return {redis.call('PTTL', KEYS[1]) > 0, redis.call('GET', KEYS[1])}"},
		{name: "set keepttl missing", src: "redis.call('SET', KEYS[1], 'w', 'KEEPTTL') return redis.call('PTTL', KEYS[1])"},
		{name: "set clears ttl", setup: "redis.call('SET', KEYS[1], 'v', 'PX', 100000)", src: "redis.call('SET', KEYS[1], 'w') return redis.call('PTTL', KEYS[1])"},
		{name: "set px 0", src: "return redis.call('SET', KEYS[1], 'v', 'PX', 0)"},
		{name: "set px negative", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX', -5)"},
		{name: "set ex 0", src: "return redis.pcall('SET', KEYS[1], 'v', 'EX', '0')"},
		{name: "set ex huge", src: "return redis.pcall('SET', KEYS[1], 'v', 'EX', '9223372036854775')"},
		{name: "set px not int", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX', 'x')"},
		{name: "set px float", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX', 1.5)"},
		{name: "set px leading zero", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX', '010')"},
		{name: "set px plus", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX', '+10')"},
		{name: "set px missing value", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX')"},
		{name: "set ex px", src: "return redis.pcall('SET', KEYS[1], 'v', 'EX', 10, 'PX', 10)"},
		{name: "set px px", src: "redis.call('SET', KEYS[1], 'v', 'PX', 10, 'PX', 100000) return redis.call('PTTL', KEYS[1]) > 10"},
		{name: "set keepttl px", src: "return redis.pcall('SET', KEYS[1], 'v', 'KEEPTTL', 'PX', 10)"},
		{name: "set px keepttl", src: "return redis.pcall('SET', KEYS[1], 'v', 'PX', 10, 'KEEPTTL')"},
		{name: "set nx xx", src: "return redis.pcall('SET', KEYS[1], 'v', 'NX', 'XX')"},
		{name: "set nx nx", src: "return redis.pcall('SET', KEYS[1], 'v', 'NX', 'NX')"},
		{name: "set unknown option", src: "return redis.pcall('SET', KEYS[1], 'v', 'FOO')"},
		{name: "set numbers", src: "local o = {} for i, v in ipairs({0.1, 1e15, 1e16, 2^53 + 1, 1/0, -1/0, 1e300, 123456789.125, 1/3, -2.5}) do redis.call('SET', KEYS[1], v) o[i] = redis.call('GET', KEYS[1]) end return o"},
		{name: "set minus zero", src: "redis.call('SET', KEYS[1], -0.0) return redis.call('GET', KEYS[1])"},
		{name: "set nan", src: "redis.call('SET', KEYS[1], 0/0) return redis.call('GET', KEYS[1])"},
		{name: "incr missing", src: "return {redis.call('INCR', KEYS[1]), redis.call('GET', KEYS[1])}"},
		{name: "incr", setup: setNumber, src: "return redis.call('INCR', KEYS[1])"},
		{name: "incrby", setup: setNumber, src: "return {redis.call('INCRBY', KEYS[1], 5), redis.call('INCRBY', KEYS[1], '-30'), redis.call('GET', KEYS[1])}"},
		{name: "incrby not int", setup: setNumber, src: "return redis.pcall('INCRBY', KEYS[1], '1.5')"},
		{name: "incr not int", setup: setString, src: "return redis.pcall('INCR', KEYS[1])"},
		{name: "incr leading space", setup: "redis.call('SET', KEYS[1], ' 1')", src: "return redis.pcall('INCR', KEYS[1])"},
		{name: "incr wrongtype", setup: setList, src: "return redis.pcall('INCR', KEYS[1])"},
		{name: "incr overflow", setup: "redis.call('SET', KEYS[1], '9223372036854775807')", src: "return redis.pcall('INCR', KEYS[1])"},
		{name: "incrby underflow", setup: "redis.call('SET', KEYS[1], '-9223372036854775807')", src: "return {redis.pcall('INCRBY', KEYS[1], -1), redis.pcall('INCRBY', KEYS[1], -1)}"},
		{name: "incr keeps ttl", setup: "redis.call('SET', KEYS[1], '1', 'PX', 100000)", src: "redis.call('INCR', KEYS[1]) return redis.call('PTTL', KEYS[1]) > 0"},
		{name: "del", setup: setString + " " + "redis.call('HSET', KEYS[2], 'f', 'v')", src: "return {redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[1]), redis.call('EXISTS', KEYS[1], KEYS[2])}"},
		{name: "exists repeats", setup: setString, src: "return redis.call('EXISTS', KEYS[1], KEYS[1], KEYS[2])"},
		{name: "type", setup: setString + " redis.call('HSET', KEYS[2], 'f', 'v') redis.call('ZADD', KEYS[3], 1, 'm')", src: "local o = {} for i = 1, 3 do o[i] = redis.call('TYPE', KEYS[i]).ok end redis.call('DEL', KEYS[1]) redis.call('LPUSH', KEYS[1], 'x') o[4] = redis.call('TYPE', KEYS[1]).ok o[5] = redis.call('TYPE', KEYS[1] .. 'none').ok return o"},
		{name: "type reply", setup: setString, src: "return redis.call('TYPE', KEYS[1])"},
		{name: "type none", src: "return redis.call('TYPE', KEYS[1])"},
		{name: "pttl", setup: setString, src: "return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2]), redis.call('TTL', KEYS[1]), redis.call('TTL', KEYS[2])}"},
		{name: "pexpire missing", src: "return redis.call('PEXPIRE', KEYS[1], 1000)"},
		{name: "pexpire", setup: setString, src: "return {redis.call('PEXPIRE', KEYS[1], 100000), redis.call('PTTL', KEYS[1]) > 99000}"},
		{name: "expire", setup: setString, src: "return {redis.call('EXPIRE', KEYS[1], 100), redis.call('TTL', KEYS[1])}"},
		{name: "pexpire negative", setup: setString, src: "return {redis.call('PEXPIRE', KEYS[1], -1), redis.call('EXISTS', KEYS[1])}"},
		{name: "pexpire zero", setup: setHash, src: "return {redis.call('PEXPIRE', KEYS[1], 0), redis.call('EXISTS', KEYS[1])}"},
		{name: "pexpire not int", setup: setString, src: "return redis.pcall('PEXPIRE', KEYS[1], '1.5')"},
		{name: "pexpire float", setup: setString, src: "return redis.pcall('PEXPIRE', KEYS[1], 1500.5)"},
		{name: "pexpire options", setup: setString, src: "return {redis.call('PEXPIRE', KEYS[1], 100000, 'XX'), redis.call('PEXPIRE', KEYS[1], 100000, 'NX'), redis.call('PEXPIRE', KEYS[1], 50000, 'GT'), redis.call('PEXPIRE', KEYS[1], 200000, 'gt'), redis.call('PEXPIRE', KEYS[1], 300000, 'LT'), redis.call('PEXPIRE', KEYS[1], 150000, 'LT'), redis.call('PEXPIRE', KEYS[1], 100000, 'XX'), redis.call('PTTL', KEYS[1]) > 99000}"},
		{name: "pexpire lt no ttl", setup: setString, src: "return {redis.call('PEXPIRE', KEYS[1], 100000, 'LT'), redis.call('PTTL', KEYS[1]) > 0}"},
		{name: "pexpire gt no ttl", setup: setString, src: "return {redis.call('PEXPIRE', KEYS[1], 100000, 'GT'), redis.call('PTTL', KEYS[1])}"},
		{name: "pexpire nx xx", setup: setString, src: "return redis.pcall('PEXPIRE', KEYS[1], 100, 'NX', 'XX')"},
		{name: "pexpire gt lt", setup: setString, src: "return redis.pcall('PEXPIRE', KEYS[1], 100, 'GT', 'LT')"},
		{name: "pexpire bad option", setup: setString, src: "return redis.pcall('PEXPIRE', KEYS[1], 100, 'FOO')"},
		{name: "expire overflow", setup: setString, src: "return redis.pcall('EXPIRE', KEYS[1], '9223372036854775')"},
		{name: "pexpire overflow", setup: setString, src: "return redis.pcall('PEXPIRE', KEYS[1], '9223372036854775807')"},
		{name: "pexpireat past", setup: setString, src: "return {redis.call('PEXPIREAT', KEYS[1], 1000), redis.call('EXISTS', KEYS[1])}"},
		{name: "pexpireat future", setup: setString, src: "local tm = redis.call('TIME') return {redis.call('PEXPIREAT', KEYS[1], tm[1] * 1000 + 100000), redis.call('PTTL', KEYS[1]) > 98000}"},
		{name: "time", src: "local t = redis.call('TIME') return {#t, type(t[1]), type(t[2]), tonumber(t[2]) < 1000000, tonumber(t[1]) > 1700000000}"},
		{name: "time arity", src: "return redis.pcall('TIME', 'x')"},
	})
}

func TestHashCommands(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "hset", src: "return {redis.call('HSET', KEYS[1], 'a', '1', 'b', '2'), redis.call('HSET', KEYS[1], 'a', '3', 'c', '4'), redis.call('HGETALL', KEYS[1])}"},
		{name: "hset odd", src: "return redis.pcall('HSET', KEYS[1], 'a', '1', 'b')"},
		{name: "hset arity", src: "return redis.pcall('HSET', KEYS[1], 'a')"},
		{name: "hset wrongtype", setup: setString, src: "return redis.pcall('HSET', KEYS[1], 'a', '1')"},
		{name: "hset numbers", src: "redis.call('HSET', KEYS[1], 1.5, 2^60) return redis.call('HGETALL', KEYS[1])"},
		{name: "hget", setup: setHash, src: "return {redis.call('HGET', KEYS[1], 'f'), redis.call('HGET', KEYS[1], 'g'), redis.call('HGET', KEYS[2], 'f')}"},
		{name: "hget wrongtype", setup: setZSet, src: "return redis.pcall('HGET', KEYS[1], 'f')"},
		{name: "hmget", setup: "redis.call('HSET', KEYS[1], 'a', '1', 'b', '2')", src: "return redis.call('HMGET', KEYS[1], 'b', 'x', 'a')"},
		{name: "hmget first", setup: "redis.call('HSET', KEYS[1], 'a', '1')", src: "return {redis.call('HMGET', KEYS[1], 'a')[1], tostring(redis.call('HMGET', KEYS[1], 'x')[1])}"},
		{name: "hmget missing key", src: "return redis.call('HMGET', KEYS[1], 'a', 'b')"},
		{name: "hmget missing key false", src: "local r = redis.call('HMGET', KEYS[1], 'a', 'b') return {#r, tostring(r[1])}"},
		{name: "hmget wrongtype", setup: setString, src: "return redis.pcall('HMGET', KEYS[1], 'a')"},
		{name: "hdel", setup: "redis.call('HSET', KEYS[1], 'a', '1', 'b', '2', 'c', '3')", src: "return {redis.call('HDEL', KEYS[1], 'a', 'x', 'a'), redis.call('HGETALL', KEYS[1])}"},
		{name: "hdel last", setup: setHash, src: "return {redis.call('HDEL', KEYS[1], 'f'), redis.call('EXISTS', KEYS[1])}"},
		{name: "hdel missing", src: "return redis.call('HDEL', KEYS[1], 'f')"},
		{name: "hdel wrongtype", setup: setString, src: "return redis.pcall('HDEL', KEYS[1], 'f')"},
		{name: "hgetall order", src: "redis.call('HSET', KEYS[1], 'c', '1', 'a', '2', 'b', '3') redis.call('HSET', KEYS[1], 'a', '9') redis.call('HDEL', KEYS[1], 'c') redis.call('HSET', KEYS[1], 'c', '5') return redis.call('HGETALL', KEYS[1])"},
		{name: "hgetall missing", src: "return redis.call('HGETALL', KEYS[1])"},
		{name: "hgetall wrongtype", setup: setList, src: "return redis.pcall('HGETALL', KEYS[1])"},
	})
}

func TestZSetCommands(t *testing.T) {
	p := newPair(t)
	const abc = "redis.call('ZADD', KEYS[1], 1, 'a', 2, 'b', 3, 'c', 4, 'd', 5, 'e')"
	runCases(t, p, []scriptCase{
		{name: "zadd", src: "return {redis.call('ZADD', KEYS[1], 1, 'a', 2, 'b'), redis.call('ZADD', KEYS[1], 3, 'a', 4, 'c'), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}"},
		{name: "zadd same member twice", src: "return {redis.call('ZADD', KEYS[1], 1, 'a', 2, 'a'), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}"},
		{name: "zadd odd", src: "return redis.pcall('ZADD', KEYS[1], 1, 'a', 2)"},
		{name: "zadd only flags", src: "return redis.pcall('ZADD', KEYS[1], 'NX', 'CH')"},
		{name: "zadd scores", src: "local o = {} for i, s in ipairs({'1', '-2.5', 'inf', '-inf', '+inf', '0x10', '1e3', '.5', '5.', '-0', '1e-320'}) do o[#o + 1] = redis.pcall('ZADD', KEYS[1], s, 'm' .. i) end o[#o + 1] = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES') return o"},
		{name: "zadd bad scores", src: "local o = {} for i, s in ipairs({'x', 'nan', '', ' 1', '1 ', '1e400', '-1e400', '1e-400', '1x', '0x'}) do o[#o + 1] = redis.pcall('ZADD', KEYS[1], s, 'm') end o[#o + 1] = redis.call('EXISTS', KEYS[1]) return o"},
		{name: "zadd partial bad", src: "return {redis.pcall('ZADD', KEYS[1], 1, 'a', 'x', 'b'), redis.call('EXISTS', KEYS[1])}"},
		{name: "zadd number scores", src: "redis.call('ZADD', KEYS[1], 0.1, 'a', 1/3, 'b', 2^53 + 1, 'c', 1e300, 'd', -0.0, 'e') return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')"},
		{name: "zadd nx", setup: abc, src: "return {redis.call('ZADD', KEYS[1], 'NX', 9, 'a', 9, 'z'), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}"},
		{name: "zadd xx", setup: abc, src: "return {redis.call('ZADD', KEYS[1], 'XX', 'CH', 9, 'a', 9, 'z'), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}"},
		{name: "zadd xx missing key", src: "return {redis.call('ZADD', KEYS[1], 'XX', 9, 'a'), redis.call('EXISTS', KEYS[1])}"},
		{name: "zadd gt lt ch", setup: abc, src: "return {redis.call('ZADD', KEYS[1], 'GT', 'CH', 0, 'a', 9, 'b', 7, 'z'), redis.call('ZADD', KEYS[1], 'LT', 'CH', 0, 'c', 9, 'd'), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}"},
		{name: "zadd ch unchanged", setup: abc, src: "return redis.call('ZADD', KEYS[1], 'CH', 1, 'a', 2, 'b')"},
		{name: "zadd incr", setup: abc, src: "return {redis.call('ZADD', KEYS[1], 'INCR', 2.5, 'a'), redis.call('ZADD', KEYS[1], 'INCR', 1, 'new'), redis.call('ZADD', KEYS[1], 'NX', 'INCR', 1, 'a'), redis.call('ZADD', KEYS[1], 'XX', 'INCR', 1, 'zz'), redis.call('ZADD', KEYS[1], 'GT', 'INCR', -1, 'a')}"},
		{name: "zadd incr nil", setup: abc, src: "return tostring(redis.call('ZADD', KEYS[1], 'NX', 'INCR', 1, 'a'))"},
		{name: "zadd incr xx missing key", src: "return tostring(redis.call('ZADD', KEYS[1], 'XX', 'INCR', 1, 'a'))"},
		{name: "zadd incr nan", setup: "redis.call('ZADD', KEYS[1], 'inf', 'a')", src: "return redis.pcall('ZADD', KEYS[1], 'INCR', '-inf', 'a')"},
		{name: "zadd incr pairs", src: "return redis.pcall('ZADD', KEYS[1], 'INCR', 1, 'a', 2, 'b')"},
		{name: "zadd nx xx", src: "return redis.pcall('ZADD', KEYS[1], 'NX', 'XX', 1, 'a')"},
		{name: "zadd gt nx", src: "return redis.pcall('ZADD', KEYS[1], 'GT', 'NX', 1, 'a')"},
		{name: "zadd gt lt", src: "return redis.pcall('ZADD', KEYS[1], 'GT', 'LT', 1, 'a')"},
		{name: "zadd wrongtype", setup: setString, src: "return redis.pcall('ZADD', KEYS[1], 1, 'a')"},
		{name: "zcard", setup: abc, src: "return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}"},
		{name: "zcard wrongtype", setup: setHash, src: "return redis.pcall('ZCARD', KEYS[1])"},
		{name: "zscore", setup: "redis.call('ZADD', KEYS[1], 0.1, 'a', '1e20', 'b', '-0', 'c', 'inf', 'd', '-inf', 'e', 12345678901234567, 'f')", src: "local o = {} for i, m in ipairs({'a', 'b', 'c', 'd', 'e', 'f', 'x'}) do o[i] = redis.call('ZSCORE', KEYS[1], m) end o[8] = tostring(redis.call('ZSCORE', KEYS[2], 'a')) return o"},
		{name: "zscore wrongtype", setup: setString, src: "return redis.pcall('ZSCORE', KEYS[1], 'a')"},
		{name: "zrem", setup: abc, src: "return {redis.call('ZREM', KEYS[1], 'a', 'x', 'a', 'c'), redis.call('ZRANGE', KEYS[1], 0, -1)}"},
		{name: "zrem last", setup: setZSet, src: "return {redis.call('ZREM', KEYS[1], 'm'), redis.call('EXISTS', KEYS[1])}"},
		{name: "zrem wrongtype", setup: setString, src: "return redis.pcall('ZREM', KEYS[1], 'm')"},
		{name: "zrange ranks", setup: abc, src: "local o = {} for _, r in ipairs({{0, -1}, {1, 2}, {-2, -1}, {-100, 1}, {3, 100}, {3, 1}, {5, 9}, {-1, -2}, {0, 0}}) do o[#o + 1] = redis.call('ZRANGE', KEYS[1], r[1], r[2]) end return o"},
		{name: "zrange rev", setup: abc, src: "return {redis.call('ZRANGE', KEYS[1], 0, 1, 'REV'), redis.call('ZRANGE', KEYS[1], -2, -1, 'REV', 'WITHSCORES'), redis.call('ZRANGE', KEYS[1], 1, 100, 'rev')}"},
		{name: "zrange withscores", setup: abc, src: "return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')"},
		{name: "zrange byscore", setup: abc, src: "return {redis.call('ZRANGE', KEYS[1], 2, 4, 'BYSCORE'), redis.call('ZRANGE', KEYS[1], '(2', '+inf', 'BYSCORE', 'LIMIT', 1, 2, 'WITHSCORES'), redis.call('ZRANGE', KEYS[1], 4, '(1', 'BYSCORE', 'REV'), redis.call('ZRANGE', KEYS[1], '+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', 1, 2)}"},
		{name: "zrange limit without by", setup: abc, src: "return redis.pcall('ZRANGE', KEYS[1], 0, -1, 'LIMIT', 0, 1)"},
		{name: "zrange bad option", setup: abc, src: "return redis.pcall('ZRANGE', KEYS[1], 0, -1, 'FOO')"},
		{name: "zrange not int", setup: abc, src: "return redis.pcall('ZRANGE', KEYS[1], 0, 'x')"},
		{name: "zrange missing", src: "return redis.call('ZRANGE', KEYS[1], 0, -1)"},
		{name: "zrange missing not int", src: "return redis.pcall('ZRANGE', KEYS[1], 0, 'x')"},
		{name: "zrange wrongtype", setup: setString, src: "return redis.pcall('ZRANGE', KEYS[1], 0, -1)"},
		{name: "zrange member order", src: "redis.call('ZADD', KEYS[1], 1, 'b', 1, 'a', 1, 'B', 1, 'aa', 0, 'z', 1, '') return redis.call('ZRANGE', KEYS[1], 0, -1)"},
		{name: "zrangebyscore", setup: abc, src: "local o = {} for _, r in ipairs({{'-inf', '+inf'}, {'(1', '3'}, {'1', '(3'}, {'(1', '(2'}, {'3', '1'}, {'', '2'}, {'-inf', 'inf'}, {2, 4}, {2.5, '+inf'}}) do o[#o + 1] = redis.call('ZRANGEBYSCORE', KEYS[1], r[1], r[2]) end return o"},
		{name: "zrangebyscore limit", setup: abc, src: "local o = {} for _, l in ipairs({{0, 2}, {1, -1}, {-1, 5}, {2, 0}, {4, 10}, {5, 1}, {0, -5}}) do o[#o + 1] = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'LIMIT', l[1], l[2]) end o[#o + 1] = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'WITHSCORES', 'LIMIT', 1, 2) o[#o + 1] = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'LIMIT', 1, 2, 'WITHSCORES') return o"},
		{name: "zrangebyscore bad bound", setup: abc, src: "return {redis.pcall('ZRANGEBYSCORE', KEYS[1], 'x', 1), redis.pcall('ZRANGEBYSCORE', KEYS[1], 'nan', 1), redis.pcall('ZRANGEBYSCORE', KEYS[1], '1 ', 1), redis.pcall('ZRANGEBYSCORE', KEYS[1], ' 1', 2)}"},
		{name: "zrangebyscore bad limit", setup: abc, src: "return {redis.pcall('ZRANGEBYSCORE', KEYS[1], 0, 1, 'LIMIT', 'x', 1), redis.pcall('ZRANGEBYSCORE', KEYS[1], 0, 1, 'LIMIT', 0), redis.pcall('ZRANGEBYSCORE', KEYS[1], 0, 1, 'BYSCORE')}"},
		{name: "zcount", setup: abc, src: "local o = {} for _, r in ipairs({{'-inf', '+inf'}, {'(1', '3'}, {'1', '(3'}, {'(1', '(2'}, {'3', '1'}, {'-inf', 'inf'}, {2, 4}, {2.5, '+inf'}}) do o[#o + 1] = redis.call('ZCOUNT', KEYS[1], r[1], r[2]) end o[#o + 1] = redis.call('ZCOUNT', KEYS[2], '-inf', '+inf') return o"},
		{name: "zcount bad bound", setup: abc, src: "return {redis.pcall('ZCOUNT', KEYS[1], 'x', 1), redis.pcall('ZCOUNT', KEYS[1], 'nan', 1), redis.pcall('ZCOUNT', KEYS[1], 1)}"},
		{name: "zcount wrongtype", setup: setList, src: "return redis.pcall('ZCOUNT', KEYS[1], '-inf', '+inf')"},
		{name: "zrangebyscore missing", src: "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf')"},
		{name: "zrangebyscore wrongtype", setup: setList, src: "return redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf')"},
		{name: "zremrangebyscore", setup: abc, src: "return {redis.call('ZREMRANGEBYSCORE', KEYS[1], '(1', 3), redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '+inf'), redis.call('EXISTS', KEYS[1])}"},
		{name: "zremrangebyscore bad", setup: abc, src: "return redis.pcall('ZREMRANGEBYSCORE', KEYS[1], 'x', 3)"},
		{name: "zremrangebyscore missing", src: "return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '+inf')"},
	})
}

func TestListCommands(t *testing.T) {
	p := newPair(t)
	const abc = "redis.call('LPUSH', KEYS[1], 'e', 'd', 'c', 'b', 'a')"
	runCases(t, p, []scriptCase{
		{name: "lpush", src: "return {redis.call('LPUSH', KEYS[1], 'a', 'b'), redis.call('LPUSH', KEYS[1], 'c'), redis.call('LRANGE', KEYS[1], 0, -1), redis.call('LLEN', KEYS[1])}"},
		{name: "lpush wrongtype", setup: setString, src: "return redis.pcall('LPUSH', KEYS[1], 'a')"},
		{name: "lpush arity", src: "return redis.pcall('LPUSH', KEYS[1])"},
		{name: "ltrim", setup: abc, src: "return {redis.call('LTRIM', KEYS[1], 1, 3), redis.call('LRANGE', KEYS[1], 0, -1)}"},
		{name: "ltrim ranges", src: "local o = {} for _, r in ipairs({{0, -1}, {-2, -1}, {-100, 1}, {3, 100}, {3, 1}, {5, 9}, {0, 0}}) do redis.call('DEL', KEYS[1]) " + abc + " redis.call('LTRIM', KEYS[1], r[1], r[2]) o[#o + 1] = redis.call('LRANGE', KEYS[1], 0, -1) o[#o + 1] = redis.call('EXISTS', KEYS[1]) end return o"},
		{name: "ltrim missing", src: "return redis.call('LTRIM', KEYS[1], 0, 1)"},
		{name: "ltrim not int", setup: abc, src: "return redis.pcall('LTRIM', KEYS[1], 0, 'x')"},
		{name: "ltrim not int wrongtype", setup: setString, src: "return redis.pcall('LTRIM', KEYS[1], 0, 'x')"},
		{name: "ltrim wrongtype", setup: setString, src: "return redis.pcall('LTRIM', KEYS[1], 0, 1)"},
		{name: "lrange", setup: abc, src: "local o = {} for _, r in ipairs({{0, -1}, {1, 2}, {-2, -1}, {-100, 1}, {3, 100}, {3, 1}, {5, 9}}) do o[#o + 1] = redis.call('LRANGE', KEYS[1], r[1], r[2]) end return o"},
		{name: "lrange missing", src: "return redis.call('LRANGE', KEYS[1], 0, -1)"},
		{name: "lrange wrongtype", setup: setZSet, src: "return redis.pcall('LRANGE', KEYS[1], 0, -1)"},
		{name: "llen", setup: abc, src: "return {redis.call('LLEN', KEYS[1]), redis.call('LLEN', KEYS[2])}"},
		{name: "llen wrongtype", setup: setHash, src: "return redis.pcall('LLEN', KEYS[1])"},
	})
}

func TestCallErrors(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "unknown", src: "return redis.call('NOSUCH', KEYS[1])"},
		{name: "unknown pcall", src: "return redis.pcall('NOSUCH', KEYS[1])"},
		{name: "lower case", setup: setString, src: "return redis.call('get', KEYS[1])"},
		{name: "mixed case", setup: setString, src: "return redis.call('GeT', KEYS[1])"},
		{name: "arity", src: "return redis.call('GET', KEYS[1], 'x')"},
		{name: "arity pcall", src: "return redis.pcall('GET')"},
		{name: "arity min", src: "return redis.pcall('SET', KEYS[1])"},
		{name: "no args", src: "return redis.call()"},
		{name: "no args pcall", src: "return redis.pcall()"},
		{name: "number name", src: "return redis.call(5)"},
		{name: "table arg", src: "return redis.call('GET', {})"},
		{name: "bool arg", src: "return redis.pcall('GET', true)"},
		{name: "nil arg", src: "return redis.pcall('GET', nil)"},
		{name: "wrongtype raised", setup: setString, src: "\n\nlocal x = 1\nreturn redis.call('HGET', KEYS[1], 'f')"},
		{name: "wrongtype caught", setup: setString, src: "local ok, e = pcall(redis.call, 'HGET', KEYS[1], 'f') return {tostring(ok), type(e), e}"},
		{name: "wrongtype rethrown", setup: setString, src: "local ok, e = pcall(redis.call, 'HGET', KEYS[1], 'f') error(e)"},
		{name: "error table", src: "error({err = 'MYCODE something'})"},
		{name: "error table caught", src: "local ok, e = pcall(error, {err = 'MYCODE x'}) return e"},
		{name: "error string", src: "\nerror('boom')"},
		{name: "error level 0", src: "error('boom', 0)"},
		{name: "error code string", src: "error('WRONGTYPE x', 0)"},
		{name: "error caught", src: "local ok, e = pcall(error, 'x') return {tostring(ok), e}"},
		{name: "error in function", src: "local function f()\n  error('deep')\nend\nreturn f()"},
		{name: "runtime error", src: "local t = nil\nreturn t.x", firstWord: true},
		{name: "arith error", src: "return {} + 1", firstWord: true},
		{name: "global read", src: "return nosuch"},
		{name: "global write", src: "nosuch = 1"},
		{name: "library write", src: "string.format = nil"},
		{name: "rawset globals", src: "rawset(_G, 'x', 1) return x"},
		// head.lua finds the struct library so (miniredis has none): the
		// store ran the scripts' pure-Lua fallback: a Reserve 9 times slower.
		{name: "rawget globals", src: "return {type(rawget(_G, 'struct')), type(rawget(_G, 'string')), tostring(rawget(_G, 'nosuch'))}"},
		{name: "rawget library", src: "return type(rawget(string, 'format'))"},
		{name: "error reply", src: "return redis.error_reply('PACER_ARG bad thing')"},
		{name: "error reply no code", src: "return redis.error_reply('bad')"},
		{name: "error reply dash", src: "return redis.error_reply('-X y')"},
		{name: "error reply empty", src: "return redis.error_reply('')"},
		{name: "error reply newlines", src: "return redis.error_reply('A b\\nc\\r\\n')"},
		{name: "error reply table", src: "return redis.error_reply('PACER_X y').err"},
		{name: "status reply", src: "return redis.status_reply('FINE')"},
		{name: "status reply table", src: "return redis.status_reply('FINE').ok"},
		{name: "err field", src: "return {err = 'boom'}"},
		{name: "err field dash", src: "return {err = '-FOO x'}"},
		{name: "err field newline", src: "return {err = 'foo\\nbar'}"},
		{name: "err not string", src: "return {err = 5}"},
		{name: "ok not string", src: "return {ok = 5}"},
		{name: "err and ok", src: "return {ok = 'x', err = 'y'}"},
		{name: "ok field", src: "return {ok = 'FINE'}"},
		{name: "nested error", src: "return {1, {err = 'INNER x'}, 3}"},
		{name: "nested status", src: "return {1, {ok = 'FINE'}, 3}"},
		{name: "compile error", src: "return (", firstWord: true},
		{name: "compile error line", src: "local x = 1\nlocal y = = 2", firstWord: true},
	})
}

func TestReadOnly(t *testing.T) {
	p := newPair(t)
	ctx := t.Context()
	keys := p.keys("ro")
	for _, src := range []string{
		"return redis.call('GET', KEYS[1])",
		"return redis.call('SET', KEYS[1], 'v')",
		"return redis.pcall('DEL', KEYS[1])",
		"return redis.call('ZRANGE', KEYS[1], 0, -1)",
	} {
		r, s := p.rdb.EvalRO(ctx, src, keys), p.st.EvalRO(ctx, src, keys)
		if d := same(r, s, false); d != "" {
			t.Errorf("EvalRO(%q) differs: %s", src, d)
		}
	}
}
