package luastore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// cjson: Redis's lua-cjson (2.1, Redis's defaults), encode and decode.
//
// cjson.encode writes an object's members in the order Lua 5.1's next
// visits them: the array part, then the hash part's nodes in order. Where
// a key lands in Lua 5.1's hash part follows from its hash and the order
// keys were inserted, which is what a table constructor gives (the scripts
// build their history entries with one: {at_ms = ..., op = ..., ...}), so
// that order is computed here for a hash part sized for its keys, as a
// constructor sizes it. A table built key by key, or one whose constructor
// gave some fields nil, may list its members in another order than Redis
// would (the JSON is the same object).

// jsonNull is cjson.null, the value JSON's null decodes to.
var jsonNull = &lua.LUserData{Value: "cjson.null"}

const jsonMaxDepth = 1000

func cjsonEncode(L *lua.LState) int {
	v := L.CheckAny(1)
	var b bytes.Buffer
	if err := encodeJSON(&b, v, 0); err != "" {
		L.RaiseError("%s", err)
	}
	L.Push(lua.LString(b.String()))
	return 1
}

// encodeJSON appends v's JSON to b, or returns cjson's error message.
func encodeJSON(b *bytes.Buffer, v lua.LValue, depth int) string {
	switch v := v.(type) {
	case *lua.LNilType:
		b.WriteString("null")
	case lua.LBool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case lua.LNumber:
		f := float64(v)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return "Cannot serialise number: must not be NaN or Inf"
		}
		b.WriteString(formatG(f, 14))
	case lua.LString:
		writeJSONString(b, string(v))
	case *lua.LUserData:
		if v != jsonNull {
			return "Cannot serialise userdata: type not supported"
		}
		b.WriteString("null")
	case *lua.LTable:
		depth++
		if depth > jsonMaxDepth {
			return fmt.Sprintf("Cannot serialise, excessive nesting (%d)", depth)
		}
		return encodeTable(b, v, depth)
	default:
		return fmt.Sprintf("Cannot serialise %s: type not supported", v.Type().String())
	}
	return ""
}

func encodeTable(b *bytes.Buffer, t *lua.LTable, depth int) string {
	// An array when every key is a positive integer (cjson's
	// lua_array_length), unless excessively sparse.
	max, items, array := 0, 0, true
	t.ForEach(func(k, _ lua.LValue) {
		n, ok := k.(lua.LNumber)
		if !ok || n < 1 || float64(n) != math.Floor(float64(n)) {
			array = false
			return
		}
		items++
		if int(n) > max {
			max = int(n)
		}
	})
	if array && max > items*2 && max > 10 {
		return "Cannot serialise table: excessively sparse array"
	}
	if array && max > 0 {
		b.WriteByte('[')
		for i := 1; i <= max; i++ {
			if i > 1 {
				b.WriteByte(',')
			}
			if err := encodeJSON(b, t.RawGetInt(i), depth); err != "" {
				return err
			}
		}
		b.WriteByte(']')
		return ""
	}
	b.WriteByte('{')
	for i, k := range nextOrder(t) {
		if i > 0 {
			b.WriteByte(',')
		}
		switch k := k.(type) {
		case lua.LString:
			writeJSONString(b, string(k))
		case lua.LNumber:
			writeJSONString(b, formatG(float64(k), 14))
		default:
			return fmt.Sprintf("Cannot serialise %s: table key must be a number or string", k.Type().String())
		}
		b.WriteByte(':')
		if err := encodeJSON(b, t.RawGet(k), depth); err != "" {
			return err
		}
	}
	b.WriteByte('}')
	return ""
}

// writeJSONString writes s quoted as lua-cjson does: control characters
// as \b \t \n \f \r or \u00XX, DEL as \u007f, and "/" escaped; other bytes
// as they are.
func writeJSONString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '/':
			b.WriteString(`\/`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 || c == 0x7f {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// nextOrder returns t's keys in the order Lua 5.1's next would visit them
// (see the top of this file): the array part (1, 2, ... while present),
// then the others placed in a hash part of Lua 5.1's layout.
func nextOrder(t *lua.LTable) []lua.LValue {
	var arr, hash []lua.LValue
	n := 1
	for ; t.RawGetInt(n) != lua.LNil; n++ {
		arr = append(arr, lua.LNumber(n))
	}
	// gopher-lua's next visits keys in the order they were inserted.
	for k, _ := t.Next(lua.LNil); k != lua.LNil; k, _ = t.Next(k) {
		if x, ok := k.(lua.LNumber); ok && float64(x) == math.Floor(float64(x)) && x >= 1 && int(x) < n {
			continue
		}
		hash = append(hash, k)
	}
	return append(arr, luaHashOrder(hash)...)
}

// luaHashOrder places keys, in their insertion order, in a Lua 5.1 hash
// part of the smallest power of two nodes that holds them (luaH_set's
// newkey: a key takes its main position, or a free node from the top when
// a key in its own main position holds it, or moves a key that is not in
// its main position out of the way), and returns them in node order.
func luaHashOrder(keys []lua.LValue) []lua.LValue {
	if len(keys) < 2 {
		return keys
	}
	size := 1 << bits.Len(uint(len(keys)-1))
	type node struct {
		key  lua.LValue
		next int
	}
	nodes := make([]node, size)
	for i := range nodes {
		nodes[i].next = -1
	}
	mainPos := func(k lua.LValue) int {
		switch k := k.(type) {
		case lua.LString:
			return int(luaStringHash(string(k)) & uint32(size-1))
		case lua.LNumber:
			if k == 0 {
				return 0
			}
			u := math.Float64bits(float64(k))
			h := uint32(u) + uint32(u>>32)
			return int(h % uint32((size-1)|1))
		case lua.LBool:
			if k {
				return 1 & (size - 1)
			}
			return 0
		}
		return 0
	}
	lastFree := size
	for _, k := range keys {
		mp := mainPos(k)
		if nodes[mp].key != nil {
			free := -1
			for lastFree > 0 {
				lastFree--
				if nodes[lastFree].key == nil {
					free = lastFree
					break
				}
			}
			if free < 0 {
				return keys // not reached: the part holds every key
			}
			other := mainPos(nodes[mp].key)
			if other != mp {
				// The key at mp is out of its main position: move it.
				for nodes[other].next != mp {
					other = nodes[other].next
				}
				nodes[other].next = free
				nodes[free] = nodes[mp]
				nodes[mp] = node{next: -1}
			} else {
				nodes[free].next = nodes[mp].next
				nodes[mp].next = free
				mp = free
			}
		}
		nodes[mp].key = k
	}
	out := make([]lua.LValue, 0, len(keys))
	for _, n := range nodes {
		if n.key != nil {
			out = append(out, n.key)
		}
	}
	return out
}

// luaStringHash is Lua 5.1's luaS_hash, seeded with the length.
func luaStringHash(s string) uint32 {
	l := len(s)
	h := uint32(l)
	step := (l >> 5) + 1
	for l1 := l; l1 >= step; l1 -= step {
		h ^= (h << 5) + (h >> 2) + uint32(s[l1-1])
	}
	return h
}

func cjsonDecode(L *lua.LState) int {
	s := checkLString(L, 1, "decode")
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		L.RaiseError("%s", jsonError(err))
	}
	if _, err := d.Token(); err == nil {
		L.RaiseError("Expected the end but found trailing data")
	}
	L.Push(jsonToLua(L, v))
	return 1
}

func jsonError(err error) string {
	if e, ok := err.(*json.SyntaxError); ok {
		return fmt.Sprintf("Expected value but found invalid token at character %d", e.Offset)
	}
	return err.Error()
}

func jsonToLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return jsonNull
	case bool:
		return lua.LBool(v)
	case json.Number:
		f, _ := str2number(string(v))
		return lua.LNumber(f)
	case string:
		return lua.LString(v)
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, e := range v {
			t.Append(jsonToLua(L, e))
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(v))
		for k, e := range v {
			t.RawSetString(k, jsonToLua(L, e))
		}
		return t
	}
	return lua.LNil
}
