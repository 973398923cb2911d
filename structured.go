package retry

import (
	"strings"
	"unicode/utf8"
)

// This file reads Structured Field Lists (RFC 9651, "Structured Field
// Values for HTTP"), the syntax of the RateLimit and RateLimit-Policy
// fields. It follows the RFC's parsing algorithms (section 4.2) exactly, so
// that a field the RFC rejects is rejected here, and it does so without
// allocating (but for a field in several lines): every value it hands out
// is a piece of the field's own text.
//
// Only what the rate limit fields need is kept: each member's bare item
// (its kind, its text and, for an Integer, its value) and the two
// parameters the caller names. Everything else (the other parameters, the
// items of an inner list, the values of Decimals, Byte Sequences, Booleans,
// Dates and Display Strings) is checked and skipped, so that a field with a
// parameter of any kind of its own (the draft allows them) stays valid.

// sfKind is the type of a bare item, or sfInnerList for a member that is an
// inner list.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplayString
	sfInnerList
)

// sfValue is a bare item: its kind, its text as written (a String with its
// quotes and escapes), and the value of an Integer.
type sfValue struct {
	kind sfKind
	text string
	num  int64
}

// integer returns the value of an Integer that is at least min.
func (v sfValue) integer(min int64) (int64, bool) {
	return v.num, v.kind == sfInteger && v.num >= min
}

// sfMember is one member of a List: an item, or an inner list (whose value
// has kind sfInnerList and whose items are checked, not kept), with the
// parameters named by the list's keys.
type sfMember struct {
	value  sfValue
	params [2]sfParam // params[i] is the parameter named keys[i]
}

// sfParam is a parameter's value, if the member has it. A key without a
// value is the Boolean true; a repeated key keeps its last value, as RFC
// 9651 says.
type sfParam struct {
	sfValue
	found bool
}

// sfList iterates over the members of a List field, given as the lines the
// field came in (RFC 9651 reads several lines as one, joined with commas).
// Call next until it returns false, then valid: a field that is not a valid
// List must be ignored whole, so what next returned counts only if valid
// says so.
type sfList struct {
	p      sfParser
	failed bool
	done   bool
}

// newSFList prepares to read the field made of lines, keeping the
// parameters named keys of each member (an empty key keeps none). Most
// fields come in one line, which is read in place; several lines are joined
// first, since a member may not end where a line does (a String may hold a
// comma), which costs one allocation for that rare field.
func newSFList(lines []string, keys [2]string) sfList {
	var s string
	switch len(lines) {
	case 0:
	case 1:
		s = lines[0]
	default:
		s = strings.Join(lines, ", ")
	}
	l := sfList{p: sfParser{s: s, keys: keys}}
	l.p.skipSP()
	l.done = !l.p.more() // an empty field is an empty List
	return l
}

// next returns the next member, or false at the end of the field or at the
// first error.
func (l *sfList) next() (sfMember, bool) {
	if l.done || l.failed {
		return sfMember{}, false
	}
	m, ok := l.p.member()
	if !ok {
		l.failed = true
		return sfMember{}, false
	}
	l.p.skipOWS()
	switch {
	case !l.p.more():
		l.done = true
	case l.p.peek() != ',':
		l.failed = true
		return sfMember{}, false
	default:
		l.p.i++
		l.p.skipOWS()
		if !l.p.more() {
			l.failed = true // a trailing comma
			return sfMember{}, false
		}
	}
	return m, true
}

// valid reports whether the whole field has been read and is a valid List.
func (l *sfList) valid() bool { return l.done && !l.failed }

// sfParser reads s from position i, one RFC 9651 rule at a time. Each rule
// returns false when the text does not match it; the position is then
// somewhere inside the text, and the caller gives up.
type sfParser struct {
	s    string
	i    int
	keys [2]string // the parameters to keep
}

func (p *sfParser) more() bool { return p.i < len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

func (p *sfParser) skipSP() {
	for p.more() && p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.more() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// member reads an item or an inner list, with its parameters (RFC 9651,
// sections 4.2.1.1 and 4.2.3).
func (p *sfParser) member() (sfMember, bool) {
	var m sfMember
	start := p.i
	if p.more() && p.peek() == '(' {
		if !p.innerList() {
			return m, false
		}
		m.value = sfValue{kind: sfInnerList, text: p.s[start:p.i]}
	} else {
		v, ok := p.bareItem()
		if !ok {
			return m, false
		}
		m.value = v
	}
	return m, p.parameters(&m.params)
}

// innerList reads "(" items separated by spaces ")" (section 4.2.1.2),
// without its parameters, which member reads.
func (p *sfParser) innerList() bool {
	p.i++ // "("
	for p.more() {
		p.skipSP()
		if !p.more() {
			return false
		}
		if p.peek() == ')' {
			p.i++
			return true
		}
		if _, ok := p.bareItem(); !ok {
			return false
		}
		if !p.parameters(nil) {
			return false
		}
		if !p.more() || (p.peek() != ' ' && p.peek() != ')') {
			return false
		}
	}
	return false
}

// parameters reads any number of ";" key ["=" bare-item] (section
// 4.2.3.2), and keeps in kept, if not nil, those named by p.keys.
func (p *sfParser) parameters(kept *[2]sfParam) bool {
	for p.more() && p.peek() == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return false
		}
		v := sfValue{kind: sfBoolean, text: "?1"} // a key alone is true
		if p.more() && p.peek() == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return false
			}
		}
		if kept == nil {
			continue
		}
		for i, k := range p.keys {
			if k != "" && k == key {
				kept[i] = sfParam{v, true} // the last of a repeated key wins
			}
		}
	}
	return true
}

// key reads ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
// (section 4.2.3.3).
func (p *sfParser) key() (string, bool) {
	start := p.i
	if !p.more() || !(isLower(p.peek()) || p.peek() == '*') {
		return "", false
	}
	p.i++
	for p.more() {
		c := p.peek()
		if !(isLower(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

// bareItem reads a bare item of any kind (section 4.2.3.1).
func (p *sfParser) bareItem() (sfValue, bool) {
	if !p.more() {
		return sfValue{}, false
	}
	start := p.i
	var v sfValue
	ok := false
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		v, ok = p.number()
	case c == '"':
		v.kind, ok = sfString, p.str()
	case isAlpha(c) || c == '*':
		v.kind, ok = sfToken, p.token()
	case c == ':':
		v.kind, ok = sfBytes, p.bytes()
	case c == '?':
		v.kind, ok = sfBoolean, p.boolean()
	case c == '@':
		p.i++
		v, ok = p.number()
		ok = ok && v.kind == sfInteger
		v.kind = sfDate
	case c == '%':
		v.kind, ok = sfDisplayString, p.displayString()
	}
	v.text = p.s[start:p.i]
	return v, ok
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a point, 1 to 3 digits), with an optional "-" (section 4.2.4).
func (p *sfParser) number() (sfValue, bool) {
	v := sfValue{kind: sfInteger}
	neg := p.more() && p.peek() == '-'
	if neg {
		p.i++
	}
	if !p.more() || !isDigit(p.peek()) {
		return v, false
	}
	digits, fraction := 0, -1 // fraction counts the digits after the point, once there is one
scan:
	for ; p.more(); p.i++ {
		switch c := p.peek(); {
		case isDigit(c) && fraction >= 0:
			fraction++
		case isDigit(c):
			digits++
			v.num = v.num*10 + int64(c-'0') // at most 16 digits before failing: no overflow
		case c == '.' && fraction < 0 && digits <= 12:
			v.kind, fraction = sfDecimal, 0
		case c == '.' && fraction < 0:
			return v, false // more than 12 digits before the point
		default:
			break scan
		}
		if (fraction < 0 && digits > 15) || (fraction >= 0 && digits+1+fraction > 16) {
			return v, false
		}
	}
	if fraction == 0 || fraction > 3 {
		return v, false // a point with no digit after it, or more than three
	}
	if neg {
		v.num = -v.num
	}
	if v.kind == sfDecimal {
		v.num = 0 // only Integers carry a value here
	}
	return v, true
}

// str reads a String: DQUOTE, printable ASCII with \" and \\ escaped,
// DQUOTE (section 4.2.5).
func (p *sfParser) str() bool {
	p.i++ // DQUOTE
	for p.more() {
		c := p.peek()
		p.i++
		switch {
		case c == '\\':
			if !p.more() || (p.peek() != '"' && p.peek() != '\\') {
				return false
			}
			p.i++
		case c == '"':
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// token reads ( ALPHA / "*" ) *( tchar / ":" / "/" ) (section 4.2.6).
func (p *sfParser) token() bool {
	p.i++ // checked by bareItem
	for p.more() && (isTchar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
		p.i++
	}
	return true
}

// bytes reads ":" base64 ":" (section 4.2.7): the base64 alphabet, with
// "=" only as padding at the end, of a length that decodes. The RFC asks
// parsers not to fail on missing padding or non-zero pad bits, so those are
// allowed.
func (p *sfParser) bytes() bool {
	p.i++ // ":"
	data, pad := 0, 0
	for p.more() {
		c := p.peek()
		p.i++
		switch {
		case c == ':':
			// Four characters hold three bytes; one alone holds none.
			return data%4 != 1 && (pad == 0 || (pad <= 2 && (data+pad)%4 == 0))
		case c == '=':
			pad++
		case pad > 0 || !(isAlpha(c) || isDigit(c) || c == '+' || c == '/'):
			return false
		default:
			data++
		}
	}
	return false
}

// boolean reads "?0" or "?1" (section 4.2.8).
func (p *sfParser) boolean() bool {
	p.i++ // "?"
	if !p.more() || (p.peek() != '0' && p.peek() != '1') {
		return false
	}
	p.i++
	return true
}

// displayString reads "%" DQUOTE, printable ASCII or %xx in lower-case hex,
// DQUOTE, whose bytes once decoded must be UTF-8 (section 4.2.10). The
// decoded text is checked a character at a time, so nothing is allocated.
func (p *sfParser) displayString() bool {
	p.i++ // "%"
	if !p.more() || p.peek() != '"' {
		return false
	}
	p.i++
	var pending [utf8.UTFMax]byte // the bytes of a character not yet complete
	n := 0
	for p.more() {
		c := p.peek()
		p.i++
		switch {
		case c < 0x20 || c > 0x7e:
			return false
		case c == '"':
			return n == 0 // no character left cut short
		case c == '%':
			if p.i+2 > len(p.s) {
				return false
			}
			hi, ok1 := lowerHex(p.s[p.i])
			lo, ok2 := lowerHex(p.s[p.i+1])
			if !ok1 || !ok2 {
				return false
			}
			p.i += 2
			pending[n] = hi<<4 | lo
			n++
			if utf8.FullRune(pending[:n]) {
				// Invalid UTF-8 decodes as RuneError of size 1; a real U+FFFD
				// has size 3.
				if r, size := utf8.DecodeRune(pending[:n]); r == utf8.RuneError && size == 1 {
					return false
				}
				n = 0
			}
		default:
			if n != 0 {
				return false // an ASCII byte inside a multi-byte character
			}
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool { return isLower(c) || ('A' <= c && c <= 'Z') }

// isTchar reports whether c may appear in an HTTP token (RFC 9110, section
// 5.6.2).
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
