package main

// The report: one line per check, each figure with its bound, and the verdict.
//
//	soak: 1000 conns: rss 142 MiB (≤ 400), fds 2013 (≤ 2100), zombies 0 (≤ 0) … PASS
//
// A figure without a bound is information (a rate, a count before a kill); it never fails a
// check. A check that could not run to its end fails with the reason instead of figures it
// did not get.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// figure is one measured number and, unless info is set, the bound it must keep.
type figure struct {
	name  string
	value float64
	unit  string  // printed after the value: "MiB", "s", "" …
	bound float64 // the value must be ≤ bound (or ≥ bound with atLeast)
	// atLeast turns the bound into a floor: replies received, bytes recovered.
	atLeast bool
	info    bool // no bound: printed, never failed
}

// ok reports whether the figure keeps its bound.
func (f figure) ok() bool {
	switch {
	case f.info:
		return true
	case f.atLeast:
		return f.value >= f.bound
	}
	return f.value <= f.bound
}

func (f figure) String() string {
	s := f.name + " " + formatNumber(f.value)
	if f.unit != "" {
		s += " " + f.unit
	}
	if f.info {
		return s
	}
	op := "≤"
	if f.atLeast {
		op = "≥"
	}
	mark := ""
	if !f.ok() {
		mark = " OUT OF BOUNDS"
	}
	return s + " (" + op + " " + formatNumber(f.bound) + ")" + mark
}

// formatNumber prints integers as integers and everything else with the precision a reader
// of the report needs.
func formatNumber(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// result is the outcome of one check.
type result struct {
	name    string
	figures []figure
	notes   []string // words after the figures: what was skipped and why
	err     error    // the check could not complete: FAIL whatever the figures say
	// infoOnly marks a probe of a known gap: printed with INFO, never failing the run.
	infoOnly bool
}

// add appends figures to the result.
func (r *result) add(fs ...figure) { r.figures = append(r.figures, fs...) }

// pass reports whether the check completed and every figure kept its bound.
func (r *result) pass() bool {
	if r.infoOnly {
		return true
	}
	if r.err != nil {
		return false
	}
	for _, f := range r.figures {
		if !f.ok() {
			return false
		}
	}
	return true
}

func (r *result) String() string {
	parts := make([]string, 0, len(r.figures)+1)
	for _, f := range r.figures {
		parts = append(parts, f.String())
	}
	parts = append(parts, r.notes...)
	if r.err != nil {
		parts = append(parts, "error: "+r.err.Error())
	}
	verdict := "PASS"
	switch {
	case r.infoOnly:
		verdict = "INFO"
	case !r.pass():
		verdict = "FAIL"
	}
	return fmt.Sprintf("soak: %s: %s … %s", r.name, strings.Join(parts, ", "), verdict)
}

// Helpers for the common figures.

// mib is a memory figure in whole MiB, rounded up so that a bound is never met by rounding.
func mib(name string, bytes int64, bound float64) figure {
	return figure{name: name, value: math.Ceil(float64(bytes) / (1 << 20)), unit: "MiB", bound: bound}
}

func count(name string, v int, bound int) figure {
	return figure{name: name, value: float64(v), bound: float64(bound)}
}

func atLeast(name string, v int, bound int) figure {
	return figure{name: name, value: float64(v), bound: float64(bound), atLeast: true}
}

func info(name string, v float64, unit string) figure {
	return figure{name: name, value: v, unit: unit, info: true}
}
