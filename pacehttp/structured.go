package pacehttp

import "fmt"

// A parser for the Lists of Items that RateLimit, RateLimit-Policy and
// RateLimit-Limit are (and the Dictionary the older drafts' RateLimit is): Structured Field Values, RFC 9651 (formerly 8941),
// section 4.2.1. It follows the RFC's algorithm and its limits (15 digits
// for an Integer, 12.3 for a Decimal) and refuses what it does not know:
// Inner Lists, and the Dates and Display Strings RFC 9651 added, which
// these fields do not use. Byte Sequences are checked for their alphabet,
// not decoded.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBinary
	sfBoolean
)

// sfBare is a bare item. num holds an Integer, and a Boolean as 0 or 1;
// str holds a String (unescaped), a Token, a Decimal's text and a Byte
// Sequence's base64 text.
type sfBare struct {
	kind sfKind
	num  int64
	str  string
}

type sfParam struct {
	key   string
	value sfBare
}

// sfItem is an Item: a bare item and its Parameters, in order, each key
// once (a repeated key keeps its first place and its last value).
type sfItem struct {
	value  sfBare
	params []sfParam
}

// param returns the value of the parameter key.
func (it sfItem) param(key string) (sfBare, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.value, true
		}
	}
	return sfBare{}, false
}

// parseList parses s as a List of Items. An empty s is an empty List.
func parseList(s string) ([]sfItem, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return nil, fmt.Errorf("byte %d is not ASCII", i+1)
		}
	}
	p := sfParser{s: s}
	p.skipSP()
	var items []sfItem
	for !p.done() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.skipOWS()
		if p.done() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ',' after an item")
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return nil, p.errorf("nothing after ','")
		}
	}
	return items, nil
}

// parseDict parses s as a Dictionary whose members are Items (RFC 9651,
// section 4.2.2; Inner Lists are refused): the single RateLimit field of
// the IETF draft's -07 and earlier, "limit=50, remaining=0, reset=3". A
// key alone is Boolean true; a key repeated keeps its last value.
func parseDict(s string) (map[string]sfItem, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return nil, fmt.Errorf("byte %d is not ASCII", i+1)
		}
	}
	p := sfParser{s: s}
	p.skipSP()
	out := map[string]sfItem{}
	for !p.done() {
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		it := sfItem{value: sfBare{kind: sfBoolean, num: 1}}
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			if it, err = p.item(); err != nil {
				return nil, err
			}
		} else if err := p.params(&it); err != nil {
			return nil, err
		}
		out[key] = it
		p.skipOWS()
		if p.done() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ',' after a member")
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return nil, p.errorf("nothing after ','")
		}
	}
	return out, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

// skipSP moves past spaces.
func (p *sfParser) skipSP() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

// skipOWS moves past spaces and tabs.
func (p *sfParser) skipOWS() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.i+1, fmt.Sprintf(format, args...))
}

func (p *sfParser) item() (sfItem, error) {
	if !p.done() && p.s[p.i] == '(' {
		return sfItem{}, p.errorf("an inner list, where an item is expected")
	}
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	return it, p.params(&it)
}

// params parses the Parameters after an Item's bare item into it.
func (p *sfParser) params(it *sfItem) error {
	for !p.done() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return err
		}
		v := sfBare{kind: sfBoolean, num: 1}
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			if v, err = p.bare(); err != nil {
				return err
			}
		}
		replaced := false
		for j := range it.params {
			if it.params[j].key == key {
				it.params[j].value, replaced = v, true
			}
		}
		if !replaced {
			it.params = append(it.params, sfParam{key, v})
		}
	}
	return nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.done() || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", p.errorf("expected a parameter key")
	}
	for !p.done() {
		c := p.s[p.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (sfBare, error) {
	if p.done() {
		return sfBare{}, p.errorf("expected a value")
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.string()
	case isAlpha(c) || c == '*':
		return p.token(), nil
	case c == ':':
		return p.binary()
	case c == '?':
		return p.boolean()
	default:
		return sfBare{}, p.errorf("%q cannot start a value", c)
	}
}

func (p *sfParser) number() (sfBare, error) {
	neg := p.s[p.i] == '-'
	if neg {
		p.i++
	}
	if p.done() || !isDigit(p.s[p.i]) {
		return sfBare{}, p.errorf("expected a digit")
	}
	start, point := p.i, -1 // point: the index of the decimal point
	var n int64
	for !p.done() {
		c := p.s[p.i]
		if c == '.' && point < 0 {
			if p.i-start > 12 {
				return sfBare{}, p.errorf("a decimal with over 12 digits before the point")
			}
			point = p.i
		} else if !isDigit(c) {
			break
		} else if point < 0 {
			n = n*10 + int64(c-'0') // 15 digits at most: no overflow
		}
		p.i++
		if point < 0 && p.i-start > 15 {
			return sfBare{}, p.errorf("an integer with over 15 digits")
		}
		if point >= 0 && p.i-start > 16 {
			return sfBare{}, p.errorf("a decimal with over 16 characters")
		}
	}
	if point < 0 {
		if neg {
			n = -n
		}
		return sfBare{kind: sfInteger, num: n}, nil
	}
	if frac := p.i - point - 1; frac == 0 || frac > 3 {
		return sfBare{}, p.errorf("a decimal needs 1 to 3 digits after the point")
	}
	text := p.s[start:p.i]
	if neg {
		text = "-" + text
	}
	return sfBare{kind: sfDecimal, str: text}, nil
}

func (p *sfParser) string() (sfBare, error) {
	p.i++ // the opening quote
	var b []byte
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return sfBare{}, p.errorf(`a backslash not before '"' or '\'`)
			}
			b = append(b, p.s[p.i])
			p.i++
		case c == '"':
			return sfBare{kind: sfString, str: string(b)}, nil
		case c < 0x20 || c == 0x7f:
			return sfBare{}, p.errorf("a control character in a string")
		default:
			b = append(b, c)
		}
	}
	return sfBare{}, p.errorf("a string without its closing quote")
}

func (p *sfParser) token() sfBare {
	start := p.i
	p.i++ // ALPHA or '*', checked by bare
	for !p.done() && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return sfBare{kind: sfToken, str: p.s[start:p.i]}
}

func (p *sfParser) binary() (sfBare, error) {
	p.i++ // the opening colon
	start := p.i
	for !p.done() && p.s[p.i] != ':' {
		c := p.s[p.i]
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return sfBare{}, p.errorf("%q in a byte sequence", c)
		}
		p.i++
	}
	if p.done() {
		return sfBare{}, p.errorf("a byte sequence without its closing ':'")
	}
	p.i++
	return sfBare{kind: sfBinary, str: p.s[start : p.i-1]}, nil
}

func (p *sfParser) boolean() (sfBare, error) {
	p.i++ // '?'
	if p.done() || p.s[p.i] != '0' && p.s[p.i] != '1' {
		return sfBare{}, p.errorf("a boolean is ?0 or ?1")
	}
	n := int64(p.s[p.i] - '0')
	p.i++
	return sfBare{kind: sfBoolean, num: n}, nil
}

func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }

func isAlpha(c byte) bool { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

// isTChar reports whether c is a tchar (RFC 9110, section 5.6.2).
func isTChar(c byte) bool {
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return isAlpha(c) || isDigit(c)
}
