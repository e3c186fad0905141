package main

// Stand-in generation for credential masking (docs/network.md §8, "Stand-ins"): the
// shape-keeping stand-ins of the built-in providers, GitHub's checksummed tokens with a
// checksum that is deliberately wrong, and a bounded random generator over a custom
// provider's pattern (regexp/syntax), every draw checked by an anchored match. The entropy is
// crypto/rand's, never anything derived from the real value.

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// maskGenMaxRepeat caps every repetition of a pattern; an unbounded one (x*, x+, x{n,})
	// draws up to it.
	maskGenMaxRepeat = 64
	// maskGenMaxBytes caps a generated value, and maskPatternMaxBytes a pattern.
	maskGenMaxBytes     = 2048
	maskPatternMaxBytes = 2048
	// maskGenMaxSteps bounds the work of one draw (nodes visited, repetitions included): a
	// nest of repetitions of something empty, ((a?)*)*, emits nothing and would otherwise run
	// 64^depth steps.
	maskGenMaxSteps = 8192
	// maskGenAttempts is how many draws a pattern gets to produce a value that matches it.
	maskGenAttempts = 64
	// maskStandInMinTail is how many drawn characters a stand-in has at least past its prefix.
	maskStandInMinTail = 16
)

// maskRand is the entropy of stand-ins: IntN(n) uniform in [0, n).
type maskRand interface{ IntN(n int) int }

// cryptoRand is maskRand over crypto/rand, buffered. Not safe for concurrent use: each
// registry draw holds the registry's lock.
type cryptoRand struct{ r *bufio.Reader }

func newCryptoRand() *cryptoRand { return &cryptoRand{bufio.NewReaderSize(rand.Reader, 256)} }

func (c *cryptoRand) IntN(n int) int {
	if n <= 1 {
		return 0
	}
	var b [4]byte
	limit := uint32(1<<32 - (1<<32)%uint64(n)) // reject the biased tail
	for {
		if _, err := io.ReadFull(c.r, b[:]); err != nil {
			panic("crypto/rand: " + err.Error()) // crypto/rand.Read does not fail (Go 1.24)
		}
		if v := binary.LittleEndian.Uint32(b[:]); limit == 0 || v < limit {
			return int(v % uint32(n))
		}
	}
}

const (
	maskDigits = "0123456789"
	maskUpper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	maskLower  = "abcdefghijklmnopqrstuvwxyz"
	maskAlnum  = maskDigits + maskUpper + maskLower
)

// shapedStandIn draws a stand-in for real that keeps its shape: prefix, then as many
// characters as the longest of real, minLen and prefix+maskStandInMinTail. A printable ASCII
// punctuation character of real stays where it is; every other position is drawn in the class
// of real's character there (digit, upper, lower; anything else lower), from alphabet past
// real's end. A class of "" means alphanumeric.
func shapedStandIn(real, prefix string, minLen int, alphabet string, r maskRand) string {
	n := max(len(real), minLen, len(prefix)+maskStandInMinTail)
	if alphabet == "" {
		alphabet = maskAlnum
	}
	b := make([]byte, n)
	copy(b, prefix)
	for i := len(prefix); i < n; i++ {
		set := alphabet
		if i < len(real) {
			switch c := real[i]; {
			case c >= '0' && c <= '9':
				set = maskDigits
			case c >= 'A' && c <= 'Z':
				set = maskUpper
			case c >= 'a' && c <= 'z':
				set = maskLower
			case c > ' ' && c < 0x7f && !strings.ContainsRune(alphabet, rune(c)):
				b[i] = c
				continue
			case c > ' ' && c < 0x7f: // a symbol of the alphabet itself (AWS's / and +)
			default:
				set = maskLower
			}
		}
		b[i] = set[r.IntN(len(set))]
	}
	return string(b)
}

// GitHub's checksummed tokens: a 4-character prefix, 30 random base62 characters, then 6
// base62 characters of the CRC-32 of those 30 (docs/network.md §8).
const (
	ghChecksumPrefixLen = 4
	ghChecksumBodyLen   = 30
	ghChecksumLen       = 6
)

var ghChecksumAlphabets = []string{
	maskDigits + maskUpper + maskLower,
	maskDigits + maskLower + maskUpper,
}

func isGitHubChecksummedShape(s string) bool {
	if len(s) != ghChecksumPrefixLen+ghChecksumBodyLen+ghChecksumLen || !strings.HasPrefix(s, "gh") || s[3] != '_' {
		return false
	}
	if !strings.ContainsRune("pousr", rune(s[2])) {
		return false
	}
	for i := ghChecksumPrefixLen; i < len(s); i++ {
		if !strings.ContainsRune(maskAlnum, rune(s[i])) {
			return false
		}
	}
	return true
}

// gitHubChecksumValid reports whether s's last 6 characters are the CRC-32 of its 30 random
// ones, in either base62 alphabet order used for it.
func gitHubChecksumValid(s string) bool {
	if !isGitHubChecksummedShape(s) {
		return false
	}
	body, sum := s[ghChecksumPrefixLen:ghChecksumPrefixLen+ghChecksumBodyLen], s[ghChecksumPrefixLen+ghChecksumBodyLen:]
	crc := crc32.ChecksumIEEE([]byte(body))
	for _, alpha := range ghChecksumAlphabets {
		if base62Pad(crc, alpha, ghChecksumLen) == sum {
			return true
		}
	}
	return false
}

func base62Pad(v uint32, alpha string, width int) string {
	b := make([]byte, width)
	for i := width - 1; i >= 0; i-- {
		b[i] = alpha[v%62]
		v /= 62
	}
	return string(b)
}

// breakGitHubChecksum returns s with a checksum that does not verify, when s has the shape of
// a checksummed token: GitHub and secret scanners then take it for no token at all.
func breakGitHubChecksum(s string, r maskRand) string {
	for gitHubChecksumValid(s) {
		b := []byte(s)
		i := len(b) - 1 - r.IntN(ghChecksumLen)
		b[i] = maskAlnum[r.IntN(len(maskAlnum))]
		s = string(b)
	}
	return s
}

// maskPattern is a custom provider's pattern, parsed for generation (not simplified, so that a
// counted repetition stays one node the cap applies to) and compiled anchored for the check of
// every draw.
type maskPattern struct {
	src      string
	re       *syntax.Regexp
	anchored *regexp.Regexp
	find     *regexp.Regexp
	// literalPrefix is the pattern's literal start (a short match counts only with one of
	// at least maskDistinctivePrefix characters).
	literalPrefix string
}

// compileMaskPattern checks a custom pattern as A2 of docs/network.md §8 says: bounded, a Go
// regexp, not matching the empty string, and able to generate a value matching itself.
func compileMaskPattern(src string, r maskRand) (*maskPattern, error) {
	if len(src) > maskPatternMaxBytes {
		return nil, fmt.Errorf("pattern is longer than %d bytes", maskPatternMaxBytes)
	}
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern does not parse: %w", err)
	}
	anchored, err := regexp.Compile(`\A(?:` + src + `)\z`)
	if err != nil {
		return nil, fmt.Errorf("pattern does not compile: %w", err)
	}
	find, err := regexp.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("pattern does not compile: %w", err)
	}
	if find.MatchString("") {
		return nil, errors.New("pattern matches the empty string")
	}
	prefix, _ := find.LiteralPrefix()
	p := &maskPattern{src: src, re: re, anchored: anchored, find: find, literalPrefix: prefix}
	if _, err := p.generate(r); err != nil {
		return nil, err
	}
	return p, nil
}

// generate draws a value that fully matches the pattern: ASCII first, then (for classes with
// no ASCII member) any rune, maskGenAttempts draws in all.
func (p *maskPattern) generate(r maskRand) (string, error) {
	for i := range maskGenAttempts {
		g := maskGen{r: r, ascii: i < maskGenAttempts/2}
		if !g.gen(p.re) || g.b.Len() > maskGenMaxBytes {
			continue
		}
		v := g.b.String()
		if strings.IndexByte(v, 0) < 0 && utf8.ValidString(v) && p.anchored.MatchString(v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("pattern %q cannot generate a bounded value that matches it", p.src)
}

// maskGen is one draw over a parsed pattern.
type maskGen struct {
	r     maskRand
	ascii bool
	steps int
	b     strings.Builder
}

// gen appends a random match of re; false when re cannot be generated (no match, a repetition
// past maskGenMaxRepeat, an empty class, the size or the work bound).
func (g *maskGen) gen(re *syntax.Regexp) bool {
	if g.steps++; g.steps > maskGenMaxSteps || g.b.Len() > maskGenMaxBytes {
		return false
	}
	switch re.Op {
	case syntax.OpNoMatch:
		return false
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true // assertions: the anchored check judges the draw
	case syntax.OpLiteral:
		for _, c := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && g.r.IntN(2) == 0 {
				c = unicode.SimpleFold(c)
			}
			g.b.WriteRune(c)
		}
		return true
	case syntax.OpCharClass:
		return g.class(re.Rune)
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		if g.ascii {
			g.b.WriteByte(byte(' ' + g.r.IntN(0x7f-' ')))
		} else {
			return g.class([]rune{0x20, 0x7e, 0xa1, 0xd7ff})
		}
		return true
	case syntax.OpCapture:
		return g.gen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if lo > maskGenMaxRepeat {
			return false
		}
		if hi < 0 || hi > maskGenMaxRepeat {
			hi = maskGenMaxRepeat
		}
		n := lo + g.r.IntN(hi-lo+1)
		for range n {
			if !g.gen(re.Sub[0]) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !g.gen(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		return g.gen(re.Sub[g.r.IntN(len(re.Sub))])
	}
	return false
}

// class appends one rune of the ranges (pairs lo, hi); in ASCII mode only printable ASCII
// members count. Each range is picked with a weight of its size.
func (g *maskGen) class(ranges []rune) bool {
	type span struct{ lo, hi rune }
	var spans []span
	total := 0
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if g.ascii {
			lo, hi = max(lo, ' '), min(hi, 0x7e)
		} else {
			hi = min(hi, unicode.MaxRune)
		}
		if lo > hi {
			continue
		}
		spans = append(spans, span{lo, hi})
		total += int(hi-lo) + 1
	}
	if total == 0 {
		return false
	}
	k := g.r.IntN(total)
	for _, s := range spans {
		if n := int(s.hi-s.lo) + 1; k >= n {
			k -= n
			continue
		}
		c := s.lo + rune(k)
		if c >= 0xd800 && c <= 0xdfff || c == 0 {
			return false // not encodable, or NUL: redraw
		}
		g.b.WriteRune(c)
		return true
	}
	return false
}
