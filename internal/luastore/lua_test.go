package luastore

import (
	"fmt"
	"strings"
	"testing"
)

// The Lua environment and the conversions, each case run on Redis and on a
// Store: replies, Lua 5.1's number rules, string.format, the string and
// table libraries, cjson.

func TestReplies(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "float", src: "return 2.7"},
		{name: "negative float", src: "return -2.7"},
		{name: "huge", src: "return 1e300"},
		{name: "minus huge", src: "return -1e300"},
		{name: "two to 63", src: "return 2^63"},
		{name: "minus two to 63", src: "return -2^63"},
		{name: "nan", src: "return 0/0"},
		{name: "inf", src: "return 1/0"},
		{name: "big integer", src: "return 2^53 + 1"},
		{name: "true", src: "return true"},
		{name: "false", src: "return false"},
		{name: "nil", src: "return nil"},
		{name: "nothing", src: "local x = 1"},
		{name: "string", src: "return 'a\\0b'"},
		{name: "empty string", src: "return ''"},
		{name: "array", src: "return {1, 'a', {2, {3}}, true, false, 5}"},
		{name: "array hole", src: "return {1, 2, nil, 4}"},
		{name: "array with hash", src: "return {1, 2, n = 3, [5] = 5}"},
		{name: "empty table", src: "return {}"},
		{name: "function", src: "return function() end"},
		{name: "double", src: "return {double = 3.5}"},
		{name: "double inf", src: "return {double = 1/0}"},
		{name: "double tiny", src: "return {double = 0.1}"},
		{name: "big number", src: "return {big_number = '123456789012345678901234567890'}"},
		{name: "map", src: "return {map = {a = 1, b = 'x', c = true}}"},
		{name: "map nested", src: "return {1, {map = {a = {1, 2}, b = {double = 0.5}}}}"},
		{name: "set", src: "return {set = {a = true, b = true, c = true}}"},
		{name: "multiple", src: "return 1, 2"},
		{name: "keys argv", src: "return {#KEYS, KEYS[1] ~= nil, #ARGV, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]}", args: []any{"s", 42, int64(-7), 2.5, 1e21, true, []byte("b")}},
		{name: "argv float", src: "return ARGV", args: []any{0.1, 1.0 / 3, 1e-7, float32(0.1), uint64(1 << 63)}},
		{name: "select", src: "return select('#', 1, nil, 3)"},
		{name: "unpack", src: "return {unpack({1, 2, 3}, 2)}"},
		{name: "length", src: "local t = {} for i = 1, 10 do t[i] = i end return #t"},
		{name: "type", src: "return {type(1), type('a'), type({}), type(nil), type(true), type(print), type(redis), type(redis.call)}"},
		{name: "version", src: "return {_VERSION, redis.REDIS_VERSION}"},
		{name: "sha1hex", src: "return {redis.sha1hex(''), redis.sha1hex('abc'), redis.sha1hex(12)}"},
		{name: "log", src: "redis.log(redis.LOG_WARNING, 'hello') return redis.LOG_NOTICE"},
		{name: "os", src: "return type(os)"},
		{name: "io", src: "return type(io)"},
		{name: "pcall ok", src: "return {pcall(function(a) return a + 1, 'x' end, 1)}"},
		{name: "pcall error", src: "local ok, e = pcall(function() error({code = 1}) end) return {tostring(ok), type(e), e.code}"},
		{name: "assert", src: "assert(false, 'nope')"},
		{name: "assert caught", src: "local ok, e = pcall(assert, false, 'nope') return e"},
		{name: "assert ok", src: "return assert(1, 'nope')"},
	})
}

func TestNumbers(t *testing.T) {
	p := newPair(t)
	values := []string{"0", "1", "-1", "0.1", "1/3", "-2/3", "100", "1e14", "1e15", "123456789012345", "12345678901234", "2^53", "2^63", "1e100", "1e-5", "1e-4", "0.0001234", "5e-324", "1/0", "-1/0", "0/0", "-(0/0)", "1.5", "-1234.5678", "1795661538123456", "1795661538123456.7", "99999999999999.5", "0.30000000000000004"}
	var cases []scriptCase
	for _, v := range values {
		cases = append(cases,
			scriptCase{name: "tostring " + v, src: "local x = " + v + " return tostring(x)"},
			scriptCase{name: "concat " + v, src: "local x = " + v + " return 'x' .. x .. x"},
		)
	}
	cases = append(cases,
		scriptCase{name: "tostring minus zero", src: "local x = -0.0 return tostring(x)"},
		scriptCase{name: "concat literal", src: "return 1 .. 2 .. ' ' .. 0.1 .. 1e15"},
		scriptCase{name: "tonumber", src: "local o = {} for i, s in ipairs({'1e5', ' 0x10 ', '010', 'inf', '-inf', 'nan', '', '1e400', '-0x10', '0x1p4', '  12  ', '12a', '1.', '.5', '1e', '1e+', '0x', '5\\0', 'infinity', 'INF', 'Infinity', '1_000', '+5', '- 5', '\\t5\\n', '\\v5\\f', '0b1', '0o7', '1.5e3', 'x', '0x1.8p1', '1e-400', '  ', '.', '-.5e-2', 'nan(123)', '0X1F'}) do o[i] = tostring(tonumber(s)) end return o"},
		scriptCase{name: "tonumber base", src: "return {tonumber('ff', 16), tonumber('zz', 36), tostring(tonumber('8', 8)), tonumber(' 11 ', 2), tonumber('-ff', 16), tonumber('0x1f', 16), tostring(tonumber('', 16)), tonumber(10, 16)}"},
		scriptCase{name: "tonumber number", src: "return {tonumber(5), tostring(tonumber(nil)), tostring(tonumber({}))}"},
		scriptCase{name: "coercion", src: "local a, b, c, d = '010', '1e2', ' 5 ', '0x10' return {tostring(a + 0), tostring(b * 1), tostring(c + 0), tostring(d + 0), tostring(-'3'), tostring('5' % 3), tostring('2' ^ '3'), tostring('10' / '4'), tostring('7' - 1.5)}"},
		scriptCase{name: "coercion error", src: "local a = 'abc' return a + 1", firstWord: true},
		scriptCase{name: "literals", src: "return {tostring(010), tostring(0x10), tostring(1e2), tostring(.5), tostring(0xff), tostring(1e308 * 10)}"},
		scriptCase{name: "for strings", src: "local s = 0 for i = '1', '3' do s = s + i end return s"},
		scriptCase{name: "modulo", src: "local o = {} for _, ab in ipairs({{5.5, 2}, {-7, 3}, {7, -3}, {-4, 2}, {1e300, 7}, {5, 1/0}, {-5, 1/0}, {5, 0}, {0, 0}, {2^53, 3}, {1.7976931348623157e308, 1e-300}, {-0.5, 1}, {3, 0.1}, {1795661538123456, 1099511627776}, {-1, 1e-20}}) do local a, b = ab[1], ab[2] o[#o + 1] = tostring(a % b) end return o"},
		scriptCase{name: "modulo constant", src: "return {tostring(-4 % 2), tostring(7 % -3), tostring(5.5 % 2)}"},
		scriptCase{name: "modulo format", src: "local a, b = -4, 2 return string.format('%.3f %d', a % b, a % b)"},
		scriptCase{name: "math", src: "return {math.floor(-2.5), math.ceil(-2.5), tostring(math.max(1, 2.5)), tostring(math.min(-1, 2)), math.floor('010'), tostring(math.max(1, '20')), tostring(math.abs(-0.5)), tostring(math.sqrt(2)), tostring(math.huge), tostring(-math.huge), tostring(math.fmod(-7, 3)), tostring(math.floor(1e300)), tostring(math.ceil(-0.5))}"},
		scriptCase{name: "math exp", src: "local o = {} for i, x in ipairs({0, 1, -1, 0.5, -0.001, -1e-10, -3.5, 10, -700, -745, -750, 709, 710, -1/0, 1/0, 1e-300, -0.35040894448293491, -0.78259627366395623, -608.82556080038523, 659.78892126215578}) do o[i] = string.format('%.17g', math.exp(x)) end return o"},
		scriptCase{name: "math exp decay", src: "local o = {} for i = 1, 200 do o[i] = string.format('%.17g', 12345.678 * math.exp(-math.max(i * 123457 - 7, 0) / 10000000) + 3) end return o"},
		scriptCase{name: "number argument", src: "redis.call('SET', KEYS[1], 1795661538123456.7) return redis.call('GET', KEYS[1])"},
	)
	runCases(t, p, cases)
}

func TestFormat(t *testing.T) {
	p := newPair(t)
	specs := []struct {
		format string
		args   string
	}{
		{"%d", "2.7"}, {"%d", "-2.7"}, {"%d", "1e15"}, {"%d", "-0.5"}, {"%d", "2^63"}, {"%d", "0/0"}, {"%d", "'12'"}, {"%d", "'2.7'"},
		{"%5d|%-5d|%05d|%+d|% d|%.3d", "42, 42, 42, 42, 42, 7"}, {"%i", "3"},
		{"%x %X %#x %o %#o %u", "255, 255, 255, 8, 8, 4"}, {"%x %u %o", "-1, -1, -1"}, {"%x", "2^64"}, {"%+x", "255"},
		{"%c%c%c", "65, 200, 0"}, {"%5c|%-3c|", "65, 66"},
		{"%e %.3e %E %10.2e", "12345.678, 12345.678, 0.000123, -5"},
		{"%f %.0f %.3f %.3f %.3f", "1.5, 2.5, -0.0005, 2.0005, 1e20"}, {"%10.3f|%-10.3f|%+.1f|% .1f|%010.2f", "3.14159, 3.14159, 1, 1, -3.5"},
		{"%.3f %.3f", "-0.0, 1/3"}, {"%.3f %f %e %g", "1/0, -1/0, 0/0, -(0/0)"}, {"%5.1f|%-6f|%G|%E", "1/0, -1/0, 1/0, 0/0"},
		{"%g %g %g %g %g", "100000, 1e6, 1e-4, 1e-5, 0.5"}, {"%.14g %.17g %.17g %.3g", "1/3, 0.1, 1e15, 1234567"}, {"%#g %#.3g %G", "1, 1, 1e-10"},
		{"%s %s %s", "1, 1.5, 1e15"}, {"%s|%.2s|%5s|%-5s|%5.1s", "'abc', 'abc', 'ab', 'ab', 'xyz'"}, {"%s", "'a\\0b'"},
		{"%.3s", "'a\\0bcd'"}, {"%s", "string.rep('x', 120) .. '\\0' .. 'y'"}, {"%10s|", "'é'"}, {"%.1s", "'é'"},
		{"%q", "'a\"b\\\\c\\nd\\re\\0f'"}, {"%q", "12.5"}, {"%%d %d %%", "5"}, {"%5%", ""},
		{"%d %.3f %.17g %s", "'10', '1.5', '0.1', 2"},
		{"1 %d %d %d %d %d %.3f", "1795661538123456, 2100, 3, 0, -400000000, 18.267"},
	}
	var cases []scriptCase
	for _, s := range specs {
		args := ""
		if s.args != "" {
			args = ", " + s.args
		}
		cases = append(cases, scriptCase{name: fmt.Sprintf("format %q %s", s.format, s.args), src: fmt.Sprintf("return string.format(%q%s)", s.format, args)})
	}
	for _, bad := range []string{"'%y', 1", "'%', 1", "'%123d', 1", "'%d'", "'%d', 'x'", "'%-----5d', 1", "'%s'", "'%d', {}"} {
		cases = append(cases, scriptCase{name: "format error " + bad, src: "return string.format(" + bad + ")", firstWord: true})
	}
	runCases(t, p, cases)
}

func TestStringsAndTables(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "string numbers", src: "return {string.len(123456789012345), string.sub(1/3, 1, 6), string.rep(1.5, 2), string.upper(1e15), string.reverse(0.1), string.byte(12, 1), (string.find(12345.5, '.', 1, true)), string.match(1e15, '%d+'), (string.gsub(0.1, '1', 'x'))}"},
		{name: "string methods", src: "local s = 'hello' return {s:len(), s:sub(2, 3), s:upper(), s:rep(2), s:byte(1, 2), s:find('l'), s:match('(h)(e)')}"},
		{name: "sub", src: "local s = 'abcdef' return {s:sub(2), s:sub(-2), s:sub(0), s:sub(3, 2), s:sub(-100, 2), s:sub(5, 100), s:sub(2.7, 3.2)}"},
		{name: "byte", src: "return {string.byte('abc'), string.byte('abc', -1), string.byte('abc', 1, 3)}"},
		{name: "find", src: "return {string.find('a.b.c', '.', 1, true), string.find('a.b.c', '.', 3, true), string.find('abc', 'b', -1), string.find('abc', '(b)(c)'), tostring(string.find('abc', 'x'))}"},
		{name: "match state", src: "return {string.match('1795661538123456 1500 3 c-12.5 permits 1.5 2', '^(%d%d+) (%d+) (%d+) (c?%-?[%d.]+)(.*)$')}"},
		{name: "match v1", src: "return {string.match('1 1795661538123456 -15 3 0.000 0 permits 1.500 2.000', '^(%d) (%d+) (%-?%d+) (%d+) (%-?[%d.]+) (%d)(.*)$')}"},
		{name: "match fast", src: "return {string.match('1795661538123456 1500 3 0 -12.25 7', '^(%d%d+) (%d+) (%d+) (%-?%d+%.?%d*) (%-?%d+%.?%d*) (%-?%d+%.?%d*)$')}"},
		{name: "match floor", src: "return {string.match(' 123 rps:17:2.5 tpm:-3:1', '^(%-?%d+)(.*)$')}"},
		{name: "gmatch records", src: "local o = {} for name, x, y in string.gmatch(' rps 12.5 3 day w17 2.25 ~p 4 -1.5', ' (%S+) (%S+) (%S+)') do o[#o + 1] = name .. '|' .. x .. '|' .. y end return o"},
		{name: "gmatch floor", src: "local o = {} for name, w, u in string.gmatch(' rps:17:2.5 tpm:-3:1', ' ([^:%s]+):(%-?%d+):(%S+)') do o[#o + 1] = name .. w .. u end return o"},
		{name: "gmatch words", src: "local o = {} for f in string.gmatch('  a bb   ccc ', '%S+') do o[#o + 1] = f end return o"},
		{name: "match window", src: "return {string.match('3000000:1234567', '^(%d+):(%d+)$')}"},
		{name: "match classes", src: "return {string.match('aZ09_ \\t-.,', '^(%a+)(%d+)(%w)(%s+)(%p+)$')}"},
		{name: "match anchors", src: "return {tostring(string.match('xab', '^ab')), string.match('abab', 'ab$'), string.match('a+b', 'a%+b'), string.match('[x]', '%[(.)%]')}"},
		{name: "match frontier", src: "return {string.match('THE (quick) fox', '%((%a+)%)'), string.match('key=val', '(%w+)=(%w+)'), string.match('aaa', 'a-'), string.match('aaa', 'a-$'), string.match('  x', '^%s*(.-)%s*$')}"},
		{name: "match position", src: "return {string.match('hello', '()ll()')}"},
		{name: "gsub", src: "return {string.gsub('hello world', 'o', '0'), string.gsub('abc', '%w', '%0%0'), string.gsub('abc', '(a)(b)', '%2%1'), string.gsub('abc', 'b', {b = 'B'}), string.gsub('abc', '.', function(c) return c:upper() end), string.gsub('abc', '', '-'), string.gsub('a b c', ' ', '', 1)}"},
		{name: "rep lower upper", src: "return {string.rep('ab', 3), string.rep('x', 0), string.lower('AbC'), string.upper('aBc'), string.reverse('abc'), string.char(72, 105)}"},
		{name: "concat", src: "return {table.concat({1, 2.5, 1e15, 1/3}, ','), table.concat({'a', 'b', 'c'}, '-', 2, 3), table.concat({}), table.concat({'a'}, ', ', 1, 0), table.concat({1, 2}, 3)}"},
		{name: "concat error", src: "return table.concat({1, {}, 3})", firstWord: true},
		{name: "table remove insert", src: "local t = {1, 2, 3} local x = table.remove(t, 1) table.insert(t, 9) table.insert(t, 1, 8) return {x, t[1], t[2], t[3], t[4], #t, table.remove(t)}"},
		{name: "table sort", src: "local t = {5, 2, 8, 1} table.sort(t) local u = {'b', 'a', 'c'} table.sort(u, function(a, b) return a > b end) return {t[1], t[2], t[3], t[4], u[1], u[2], u[3]}"},
		{name: "ipairs", src: "local o = {} for i, v in ipairs({'a', 'b', nil, 'd'}) do o[#o + 1] = i .. v end return o"},
		{name: "math huge compare", src: "local x = tonumber('inf') return {x == math.huge, tostring(x ~= x), tostring(0/0 ~= 0/0)}"},
	})
}

// TestPatterns holds luapattern.go (Lua 5.1's matcher) to Redis's.
func TestPatterns(t *testing.T) {
	p := newPair(t)
	var cases []scriptCase
	for i, c := range []string{
		"string.find('hello world', 'o w')", "string.find('hello', 'l+')", "string.find('a.b', '.', 1, true)", "string.find('a.b', '%.')",
		"string.find('abc', 'b', -1)", "string.find('abc', 'b', -10)", "string.find('abc', '', 10)", "string.find('abc', '', 4)", "string.find('', '')",
		"string.find('abc', 'c', 2.9)", "string.find('a+b', '+', 1, true)", "string.find('x^y', '^y')", "string.find('x^y', 'x^y')",
		"string.match('key = value', '(%w+)%s*=%s*(%w+)')", "string.match('(foo(bar))baz', '%b()')", "string.match('THE (quick) fox', '%f[%a]%a+')",
		"string.match('hello hello', '(h%a+) %1')", "string.match('abc', '()b()')", "string.match('aaab', 'a-b')", "string.match('aaab', 'a*')",
		"string.match('aaab', 'a?a?b')", "string.match('  trim  ', '^%s*(.-)%s*$')", "string.match('x=1, y=2', 'y=(%d)')", "string.match('[x]', '[%[](.)[%]]')",
		"string.match('a-b', '[a-]+')", "string.match(']x', '[]]')", "string.match('a^b', '[%^]')", "string.match('ab12', '[^%d]+')", "string.match('\\0a', '%z')",
		"string.match('AbC', '%u%l%u')", "string.match('a\\tb', '%c')", "string.match('!?', '%p+')", "string.match('ff09', '%x+')", "string.match('a,b', '%W')",
		"string.match('abc', '((a)(b))')", "string.match('abc', 'a(b)?c')", "string.match(12.5, '%d+')", "string.match('x', 'x$y')", "string.match('x$', 'x$')",
		"string.match('abc', 'b', 2)", "string.match('abc', '^b', 2)", "string.match('abc', 'b', -2)",
		"string.gsub('hello world', '(%w+)', '<%1>')", "string.gsub('abc', '%w', '%%')", "string.gsub('abc', 'b', '%0%0')", "string.gsub('abc', '', 'x')",
		"string.gsub('abc', '^a', 'x')", "string.gsub('aaa', 'a', 'b', 2)", "string.gsub('aaa', 'a', 'b', 0)", "string.gsub('abc', '%w', {a = 1, b = true, c = false})",
		"string.gsub('abc', '%w', function(c) if c == 'b' then return 2.5 end end)", "string.gsub('abc d', '(%w)(%w*)', '%2%1')", "string.gsub('x', 'x', 5)",
		"string.gsub('one two', '()(%w+)', '%1')",
	} {
		cases = append(cases, scriptCase{name: fmt.Sprintf("pattern %d", i), src: "return {" + c + "}"})
	}
	cases = append(cases,
		scriptCase{name: "gmatch anchor", src: "local o = {} for w in string.gmatch('^a ^b', '^%a') do o[#o + 1] = w end return o"},
		scriptCase{name: "gmatch empty", src: "local o = {} for w in string.gmatch('abc', '%a*') do o[#o + 1] = w end return o"},
		scriptCase{name: "gmatch captures", src: "local o = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do o[#o + 1] = k .. v end return o"},
		scriptCase{name: "gmatch positions", src: "local o = {} for p in string.gmatch('abc', '()') do o[#o + 1] = p end return o"},
	)
	for i, bad := range []string{"string.find('a', '%')", "string.find('a', '[a')", "string.match('a', '(a')", "string.match('a', 'a)')", "string.match('a', '%1')", "string.match('a', '%b')", "string.match('a', '%fa')", "string.gsub('a', 'a', true)", "string.gsub('abc', '%w', {a = {}})", "string.gsub('a', '(a)', '%2')"} {
		cases = append(cases, scriptCase{name: fmt.Sprintf("pattern error %d", i), src: "return {" + bad + "}", firstWord: true})
	}
	runCases(t, p, cases)
}

func TestCJSON(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "history entry", src: "return cjson.encode({at_ms = 1700000000123, op = 'set', who = 'a/b', reason = 'x\"y', before = '', after = 'z'})"},
		{name: "history weight", src: "return cjson.encode({at_ms = 1700000000123, op = 'weight', tenant = 't1', who = 'w', reason = 'r', before = '2', after = '3'})"},
		{name: "note entry", src: "local t = redis.call('TIME') return cjson.encode({at_ms = 1700000000000 + 5, op = 'pause 1m30s', who = 'ops', reason = 'the provider said so', before = 'enforce 1 permits permits b 10 5', after = 'enforce 1 permits permits b 10 5'})"},
		{name: "restore entry", src: "return cjson.encode({at_ms = 1, op = 'restore', who = 'limiter-1', reason = 'Redis had lost it (restarted empty?); put back as this Limiter last saw it', before = '', after = 'x'})"},
		{name: "key orders", src: "local o = {} o[1] = cjson.encode({a = 1, b = 2, c = 3}) o[2] = cjson.encode({zeta = 1, alpha = 2, mid = 3, q = 4, longer_key_name = 5}) o[3] = cjson.encode({x = 1}) o[4] = cjson.encode({one = 1, two = 2, three = 3, four = 4, five = 5, six = 6, seven = 7, eight = 8, nine = 9}) return o"},
		{name: "escapes", src: "return cjson.encode({'a\\\"b\\\\c/d\\n\\r\\t\\b\\f\\1\\31\\127é'})"},
		{name: "values", src: "return cjson.encode({1, 2.5, 1e20, 0.1, 1/3, -0.0, true, false, 'x', {}, {1, {2}}, 123456789012345})"},
		{name: "sparse", src: "return cjson.encode({[1] = 1, [3] = 3})"},
		{name: "too sparse", src: "return cjson.encode({[1] = 1, [30] = 3})", firstWord: true},
		{name: "mixed", src: "return cjson.encode({1, 2, x = 'y'})"},
		{name: "nan", src: "return cjson.encode({0/0})", firstWord: true},
		{name: "function", src: "return cjson.encode({print})", firstWord: true},
		{name: "null", src: "return cjson.encode({cjson.null, 1})"},
		{name: "decode", src: "local v = cjson.decode('{\"a\":[1,2.5,{\"b\":null}],\"c\":\"x\\\\u00e9\",\"d\":true,\"e\":1e3}') return {v.a[1], tostring(v.a[2]), v.a[3].b == cjson.null, v.c, tostring(v.d), v.e, #v.a}"},
		{name: "decode scalar", src: "return {cjson.decode('12'), cjson.decode('\"s\"'), tostring(cjson.decode('true'))}"},
		{name: "decode error", src: "return cjson.decode('{bad')", firstWord: true},
		{name: "round trip", src: "return cjson.encode(cjson.decode('[1,\"a\",[true,false],{}]'))"},
	})
}

// TestMultipleAssignment: an assignment of several targets evaluates
// every expression (and the tables and keys of indexed targets) before it
// assigns any, as Lua 5.1 does; gopher-lua alone assigned a local as soon
// as its value was computed (yuin/gopher-lua#440), and core.lua's gcd of
// two fleet sizes came out wrong.
func TestMultipleAssignment(t *testing.T) {
	p := newPair(t)
	runCases(t, p, []scriptCase{
		{name: "swap", src: "local a, b = 1, 2 a, b = b, a return {a, b}"},
		{name: "gcd", src: "local x, y = 3, 2 while y ~= 0 do x, y = y, x % y end return x"},
		{name: "reads the old value", src: "local a, b = 0, 0 a, b = a + 1, a + b return {a, b}"},
		{name: "index before", src: "local i, a = 3, {} i, a[i] = i + 1, 20 return {i, a[3] or 'nil', a[4] or 'nil'}"},
		{name: "index after", src: "local i, a = 1, {} a[i], i = 20, 2 return {i, a[1] or 'nil', a[2] or 'nil'}"},
		{name: "field and local", src: "local a, d, f = {}, 'e', 1 f, a.d = f, d return {f, a.d}"},
		{name: "fields", src: "local b = {z = 1, e = 2} b.z, b.e = b.e, b.z return {b.z, b.e}"},
		{name: "one target twice", src: "local t = {} t[1], t[1] = 'a', 'b' return t[1]"},
		{name: "upvalues", src: "local x, y = 1, 2 local function f() x, y = y, x end f() return {x, y}"},
		{name: "call fills", src: "local a, b, c = 0, 0, 0 a, b, c = (function() return 1, 2, 3 end)() return {a, b, c}"},
		{name: "call truncated", src: "local a, b, c = 0, 0, 0 a, b, c = (function() return 1, 2 end)(), 5 return {a, b, tostring(c)}"},
		{name: "call last fills", src: "local a, b, c = 0, 0, 0 a, b, c = 9, (function() return 1, 2 end)() return {a, b, c}"},
		{name: "fewer values", src: "local a, b = 1, 2 a, b = 3 return {a, tostring(b)}"},
		{name: "surplus evaluated", src: "local n = 0 local function f() n = n + 1 return n end local a, b = 0, 0 a, b = 1, 2, f() return {a, b, n}"},
		{name: "table from a call", src: "local t = {} local calls = 0 local function g() calls = calls + 1 return t end g().a, g().b = 1, 2 return {t.a, t.b, calls}"},
		{name: "in a loop", src: "local a, b = 0, 1 for i = 1, 10 do a, b = b, a + b end return {a, b}"},
		{name: "local statement", src: "local a, b = 1, 2 local a, b = b, a return {a, b}"},
		{name: "error line", src: "local a, b = 1, 2\na, b = b, a .. {}", firstWord: true},
	})
}

// TestCompileErrors checks the start of a compile error: Redis's text up
// to the line (Lua's parser words the rest its own way).
func TestCompileErrors(t *testing.T) {
	p := newPair(t)
	for _, src := range []string{"return (", "local x = 1\nlocal y = = 2", "x = \n\n\n", "if x then"} {
		r, s := p.eval(t, src, nil)
		if s.Err() == nil || r.Err() == nil {
			t.Fatalf("Eval(%q): redis %v, store %v, want errors", src, r.Err(), s.Err())
		}
		want := r.Err().Error()
		want = want[:strings.LastIndex(want, ":")]
		if got := s.Err().Error(); !strings.HasPrefix(got, want) {
			t.Errorf("Eval(%q) = %q, want it to start with %q", src, got, want)
		}
	}
}
