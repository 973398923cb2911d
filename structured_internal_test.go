package retry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// sfRead reads a whole List field, keeping the parameters r and t, and
// returns its members and whether it is valid.
func sfRead(lines ...string) ([]sfMember, bool) { return sfReadKeys([2]string{"r", "t"}, lines...) }

func sfReadKeys(keys [2]string, lines ...string) ([]sfMember, bool) {
	l := newSFList(lines, keys)
	var ms []sfMember
	for {
		m, ok := l.next()
		if !ok {
			break
		}
		ms = append(ms, m)
	}
	return ms, l.valid()
}

var sfListTests = []struct {
	name  string
	lines []string
	valid bool
	kinds []sfKind // of the members' values, when valid
}{
	// Lists.
	{name: "one string", lines: []string{`"a"`}, valid: true, kinds: []sfKind{sfString}},
	{name: "two members", lines: []string{`"a";r=1, "b";r=2`}, valid: true, kinds: []sfKind{sfString, sfString}},
	{name: "no space after the comma", lines: []string{`"a","b"`}, valid: true, kinds: []sfKind{sfString, sfString}},
	{name: "tabs around the comma", lines: []string{"\"a\"\t,\t\"b\""}, valid: true, kinds: []sfKind{sfString, sfString}},
	{name: "empty field", lines: []string{""}, valid: true},
	{name: "no line", lines: nil, valid: true},
	{name: "only spaces", lines: []string{"   "}, valid: true},
	{name: "leading spaces", lines: []string{`   "a"`}, valid: true, kinds: []sfKind{sfString}},
	{name: "trailing spaces", lines: []string{`"a"   `}, valid: true, kinds: []sfKind{sfString}},
	{name: "trailing tab", lines: []string{"\"a\"\t"}, valid: true, kinds: []sfKind{sfString}},
	{name: "leading tab", lines: []string{"\t\"a\""}},
	{name: "trailing comma", lines: []string{`"a",`}},
	{name: "leading comma", lines: []string{`,"a"`}},
	{name: "empty member", lines: []string{`"a",,"b"`}},
	{name: "members separated by a space", lines: []string{`"a" "b"`}},
	{name: "two lines", lines: []string{`"a"`, `"b"`}, valid: true, kinds: []sfKind{sfString, sfString}},
	{name: "a string across two lines", lines: []string{`"a`, `b"`}, valid: true, kinds: []sfKind{sfString}},
	{name: "an empty second line is a trailing comma", lines: []string{`"a"`, ``}},
	{name: "a bad second line", lines: []string{`"a"`, `"b`}},

	// Parameters and keys.
	{name: "parameters", lines: []string{`"a";r=0;t=30`}, valid: true, kinds: []sfKind{sfString}},
	{name: "key starting with a star", lines: []string{`"a";*r=1`}, valid: true, kinds: []sfKind{sfString}},
	{name: "key with every allowed character", lines: []string{`"a";a0_-.*=1`}, valid: true, kinds: []sfKind{sfString}},
	{name: "space after the semicolon", lines: []string{`"a"; r=1`}, valid: true, kinds: []sfKind{sfString}},
	{name: "space before the semicolon", lines: []string{`"a" ;r=1`}},
	{name: "upper-case key", lines: []string{`"a";R=1`}},
	{name: "key starting with a digit", lines: []string{`"a";1r=1`}},
	{name: "no key", lines: []string{`"a";=1`}},
	{name: "no value after the equals sign", lines: []string{`"a";r=`}},
	{name: "a space around the equals sign", lines: []string{`"a";r = 1`}},
	{name: "key without a value", lines: []string{`"a";r`}, valid: true, kinds: []sfKind{sfString}},

	// Integers and Decimals.
	{name: "integer", lines: []string{`1`}, valid: true, kinds: []sfKind{sfInteger}},
	{name: "negative integer", lines: []string{`-1`}, valid: true, kinds: []sfKind{sfInteger}},
	{name: "15 digits", lines: []string{`999999999999999`}, valid: true, kinds: []sfKind{sfInteger}},
	{name: "15 negative digits", lines: []string{`-999999999999999`}, valid: true, kinds: []sfKind{sfInteger}},
	{name: "16 digits", lines: []string{`1000000000000000`}},
	{name: "lone minus", lines: []string{`-`}},
	{name: "two minuses", lines: []string{`--1`}},
	{name: "plus sign", lines: []string{`+1`}},
	{name: "decimal", lines: []string{`1.123`}, valid: true, kinds: []sfKind{sfDecimal}},
	{name: "decimal of 12 and 3 digits", lines: []string{`123456789012.123`}, valid: true, kinds: []sfKind{sfDecimal}},
	{name: "decimal of 13 digits", lines: []string{`1234567890123.1`}},
	{name: "decimal of 4 fraction digits", lines: []string{`1.1234`}},
	{name: "point without a fraction", lines: []string{`1.`}},
	{name: "two points", lines: []string{`1.2.3`}},
	{name: "digits then letters", lines: []string{`1abc`}},

	// Strings.
	{name: "escaped quote", lines: []string{`"a\"b"`}, valid: true, kinds: []sfKind{sfString}},
	{name: "escaped backslash", lines: []string{`"a\\b"`}, valid: true, kinds: []sfKind{sfString}},
	{name: "empty string", lines: []string{`""`}, valid: true, kinds: []sfKind{sfString}},
	{name: "other escape", lines: []string{`"a\b"`}},
	{name: "unterminated", lines: []string{`"a`}},
	{name: "backslash at the end", lines: []string{`"a\`}},
	{name: "non-ASCII", lines: []string{`"é"`}},
	{name: "control character", lines: []string{"\"a\tb\""}},

	// Tokens.
	{name: "token", lines: []string{`abc`}, valid: true, kinds: []sfKind{sfToken}},
	{name: "token with a star", lines: []string{`*abc`}, valid: true, kinds: []sfKind{sfToken}},
	{name: "token with colon and slash", lines: []string{`a:b/c`}, valid: true, kinds: []sfKind{sfToken}},
	{name: "token with every tchar", lines: []string{"a!#$%&'*+-.^_`|~9"}, valid: true, kinds: []sfKind{sfToken}},
	{name: "token with a bad character", lines: []string{`a@b`}},

	// Byte Sequences.
	{name: "bytes", lines: []string{`:aGVsbG8=:`}, valid: true, kinds: []sfKind{sfBytes}},
	{name: "empty bytes", lines: []string{`::`}, valid: true, kinds: []sfKind{sfBytes}},
	{name: "bytes without padding", lines: []string{`:aGVsbG8:`}, valid: true, kinds: []sfKind{sfBytes}},
	{name: "bytes with padding inside", lines: []string{`:a=GVsbG8=:`}},
	{name: "bytes with a space", lines: []string{`:aGVs bG8=:`}},
	{name: "bytes in base64url", lines: []string{`:_-Ah:`}},
	{name: "unterminated bytes", lines: []string{`:aGVs`}},
	{name: "one base64 character holds no byte", lines: []string{`:0:`}},
	{name: "two base64 characters", lines: []string{`:00:`}, valid: true, kinds: []sfKind{sfBytes}},
	{name: "three base64 characters and padding", lines: []string{`:000=:`}, valid: true, kinds: []sfKind{sfBytes}},
	{name: "two base64 characters and padding", lines: []string{`:00==:`}, valid: true, kinds: []sfKind{sfBytes}},
	{name: "padding after a whole group", lines: []string{`:0000==:`}},
	{name: "only padding", lines: []string{`:====:`}},

	// Booleans, Dates, Display Strings.
	{name: "false", lines: []string{`?0`}, valid: true, kinds: []sfKind{sfBoolean}},
	{name: "true", lines: []string{`?1`}, valid: true, kinds: []sfKind{sfBoolean}},
	{name: "boolean 2", lines: []string{`?2`}},
	{name: "lone question mark", lines: []string{`?`}},
	{name: "date", lines: []string{`@1659578233`}, valid: true, kinds: []sfKind{sfDate}},
	{name: "negative date", lines: []string{`@-1`}, valid: true, kinds: []sfKind{sfDate}},
	{name: "decimal date", lines: []string{`@1.5`}},
	{name: "lone at sign", lines: []string{`@`}},
	{name: "display string", lines: []string{`%"caf%c3%a9"`}, valid: true, kinds: []sfKind{sfDisplayString}},
	{name: "display string with U+FFFD", lines: []string{`%"%ef%bf%bd"`}, valid: true, kinds: []sfKind{sfDisplayString}},
	{name: "display string in upper-case hex", lines: []string{`%"%C3%A9"`}},
	{name: "display string cut in a character", lines: []string{`%"%c3"`}},
	{name: "display string with ASCII inside a character", lines: []string{`%"%c3a"`}},
	{name: "display string not UTF-8", lines: []string{`%"%ff"`}},
	{name: "display string with a short escape", lines: []string{`%"%c"`}},
	{name: "display string without its quote", lines: []string{`%abc`}},
	{name: "unterminated display string", lines: []string{`%"abc`}},

	// Inner Lists.
	{name: "inner list", lines: []string{`("a" "b");p=1`}, valid: true, kinds: []sfKind{sfInnerList}},
	{name: "empty inner list", lines: []string{`()`}, valid: true, kinds: []sfKind{sfInnerList}},
	{name: "inner list with spaces", lines: []string{`(  "a"  1;x=2  )`}, valid: true, kinds: []sfKind{sfInnerList}},
	{name: "inner list without a space between", lines: []string{`("a""b")`}},
	{name: "inner list with a comma", lines: []string{`("a", "b")`}},
	{name: "unterminated inner list", lines: []string{`("a"`}},
	{name: "nested inner list", lines: []string{`(("a"))`}},

	// Anything else.
	{name: "bad first character", lines: []string{`<a>`}},
	{name: "non-ASCII first character", lines: []string{"\xff"}},
}

func TestSFList(t *testing.T) {
	t.Parallel()
	for _, tt := range sfListTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, valid := sfRead(tt.lines...)
			assert.Equal(t, tt.valid, valid, "valid(%q) = %v, want %v", tt.lines, valid, tt.valid)
			if !tt.valid {
				return
			}
			var kinds []sfKind
			for _, m := range ms {
				kinds = append(kinds, m.value.kind)
			}
			assert.Equal(t, tt.kinds, kinds, "kinds(%q)", tt.lines)
		})
	}
}

func TestSFValues(t *testing.T) {
	t.Parallel()
	const field = `"a\"b";r=0;t=-30;x=1.5;r=7;flag, 42;t=1, -999999999999999, tok;q=?0`
	ms, valid := sfRead(field)
	if !assert.True(t, valid) || !assert.Len(t, ms, 4) {
		return
	}
	assert.Equal(t, `"a\"b"`, ms[0].value.text)
	r := ms[0].params[0]
	assert.Equal(t, sfParam{sfValue{kind: sfInteger, text: "7", num: 7}, true}, r, "a repeated key keeps its last value")
	tv := ms[0].params[1]
	assert.Equal(t, int64(-30), tv.num)
	_, ok := tv.integer(0)
	assert.False(t, ok, "-30 is below 0")
	assert.Equal(t, int64(42), ms[1].value.num)
	assert.False(t, ms[1].params[0].found, "no r")
	assert.True(t, ms[1].params[1].found)
	assert.Equal(t, int64(-999999999999999), ms[2].value.num)
	assert.Equal(t, "tok", ms[3].value.text)

	ms, _ = sfReadKeys([2]string{"x", "flag"}, field)
	x, flag := ms[0].params[0], ms[0].params[1]
	assert.Equal(t, sfDecimal, x.kind)
	_, ok = x.integer(0)
	assert.False(t, ok, "a Decimal is not an Integer")
	assert.True(t, flag.found)
	assert.Equal(t, sfBoolean, flag.kind, "a key without a value is true")

	ms, _ = sfReadKeys([2]string{}, field)
	assert.False(t, ms[0].params[0].found || ms[0].params[1].found, "no key, no parameter kept")

	// The parameters of the items inside an inner list are not the member's.
	ms, valid = sfRead(`("a";r=1 "b";t=2);r=3`)
	assert.True(t, valid)
	assert.Equal(t, int64(3), ms[0].params[0].num)
	assert.False(t, ms[0].params[1].found)
}

func TestSFListDoesNotAllocate(t *testing.T) {
	line := []string{`"burst";r=0;t=30;pk=:cHsdsRa894==:, "daily";r=900;t=50000, ("x" 1.5);y=%"%c3%a9"`}
	l := newSFList(line, [2]string{"r", "t"})
	allocs := testing.AllocsPerRun(100, func() {
		l = newSFList(line, [2]string{"r", "t"})
		for {
			if _, ok := l.next(); !ok {
				break
			}
		}
	})
	assert.Zero(t, allocs, "allocations per field = %v, want 0", allocs)
	assert.True(t, l.valid())
}

// FuzzStructuredList reads any text as a List field: never a panic, and
// every member a piece of the field, with Integers in range; a valid field
// stays valid, with twice its members, when repeated after a comma or in a
// second line.
func FuzzStructuredList(f *testing.F) {
	for _, tt := range sfListTests {
		f.Add(strings.Join(tt.lines, ", "))
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, valid := sfRead(s)
		for _, m := range ms {
			if m.value.kind == sfInteger && (m.value.num > 999999999999999 || m.value.num < -999999999999999) {
				t.Fatalf("Integer %d out of range in %q", m.value.num, s)
			}
			if m.value.text == "" || !strings.Contains(s, m.value.text) {
				t.Fatalf("member %+v is not a piece of %q", m, s)
			}
			for _, p := range m.params {
				if p.found && p.text != "?1" && (p.text == "" || !strings.Contains(s, p.text)) { // ?1: a key alone
					t.Fatalf("parameter %+v is not a piece of %q", p, s)
				}
			}
		}
		if !valid || len(ms) == 0 {
			return
		}
		twice, ok := sfRead(s + ", " + s)
		if !ok || len(twice) != 2*len(ms) {
			t.Fatalf("%q is valid with %d members, but twice after a comma gives %v, %d", s, len(ms), ok, len(twice))
		}
		twice, ok = sfRead(s, s)
		if !ok || len(twice) != 2*len(ms) {
			t.Fatalf("%q is valid with %d members, but in two lines gives %v, %d", s, len(ms), ok, len(twice))
		}
	})
}
