package main

// Figures and the report. Every row holds, for server A, server B and the physical limit,
// the samples of each round. A latency row reports p50 and p99 over all samples of a side;
// other rows report the median over rounds. The A/B ratio is taken per round (p50 against
// p50, or value against value), and the report gives the median of those ratios and their
// range, so a slow round on a noisy machine shows up as a wide range, not as a wrong figure.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// kind says how a row is summarised and which direction is better.
type kind int

const (
	latency    kind = iota // many samples per round; lower is better; p50 and p99
	throughput             // higher is better
	level                  // lower is better (memory, size, wall time)
)

// side indexes the three series of a row.
type side int

const (
	sideA side = iota
	sideB
	sideLimit
)

// target is the issue 5 goal for a row: the A/B ratio must be ≤ or ≥ ratio, and, where set,
// A must be ≤ abs (binary size) or ≥ frac of the limit (PTY throughput).
type target struct {
	op    string // "≤" or "≥"; empty for no ratio target
	ratio float64
	abs   float64 // A ≤ abs, in the row's unit; 0 for none
	frac  float64 // A ≥ frac × limit; 0 for none
}

func (t target) String() string {
	var parts []string
	if t.op != "" {
		parts = append(parts, fmt.Sprintf("%s %g×", t.op, t.ratio))
	}
	if t.abs > 0 {
		parts = append(parts, fmt.Sprintf("≤ %g", t.abs))
	}
	if t.frac > 0 {
		parts = append(parts, fmt.Sprintf("≥ %.0f%% of limit", t.frac*100))
	}
	return strings.Join(parts, ", ")
}

// row is one line of the report.
type row struct {
	key    string
	title  string
	unit   string
	kind   kind
	target target
	series [3][][]float64 // [side][round] samples
	errs   [2]string      // first failure of each server
}

// results is the set of rows of one bench run, in report order.
type results struct {
	rows  []*row
	byKey map[string]*row
}

func newResults(defs []*row) *results {
	r := &results{rows: defs, byKey: map[string]*row{}}
	for _, d := range defs {
		r.byKey[d.key] = d
	}
	return r
}

// add records samples of a row for a side in a round.
func (r *results) add(key string, s side, round int, v ...float64) {
	w := r.byKey[key]
	if w == nil {
		panic("bench: unknown row " + key)
	}
	for len(w.series[s]) <= round {
		w.series[s] = append(w.series[s], nil)
	}
	w.series[s][round] = append(w.series[s][round], v...)
}

// fail records the first failure of a row for a server.
func (r *results) fail(key string, s side, err error) {
	w := r.byKey[key]
	if w != nil && w.errs[s] == "" {
		w.errs[s] = err.Error()
	}
}

// percentile is the q-quantile of sorted xs, linearly interpolated.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentile(s, 0.5)
}

// summary is what the report prints for one side of a row.
type summary struct {
	mid, p99 float64 // p99 only for latency rows
	n        int
}

func (w *row) summarise(s side) (summary, bool) {
	var all, perRound []float64
	for _, r := range w.series[s] {
		if len(r) == 0 {
			continue
		}
		all = append(all, r...)
		perRound = append(perRound, median(r))
	}
	if len(all) == 0 {
		return summary{}, false
	}
	if w.kind == latency {
		slices.Sort(all)
		return summary{mid: percentile(all, 0.5), p99: percentile(all, 0.99), n: len(all)}, true
	}
	return summary{mid: median(perRound), n: len(perRound)}, true
}

// ratios are the per-round A/B ratios of the rounds where both sides have figures.
func (w *row) ratios() []float64 {
	var out []float64
	for i := 0; i < len(w.series[sideA]) && i < len(w.series[sideB]); i++ {
		a, b := w.series[sideA][i], w.series[sideB][i]
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		if mb := median(b); mb != 0 {
			out = append(out, median(a)/mb)
		}
	}
	return out
}

// verdict says whether A meets the row's target.
func (w *row) verdict() string {
	t := w.target
	a, okA := w.summarise(sideA)
	if !okA || (t.op == "" && t.abs == 0 && t.frac == 0) {
		return ""
	}
	met, known := true, false
	if t.op != "" {
		if rs := w.ratios(); len(rs) > 0 {
			m := median(rs)
			known = true
			if (t.op == "≤" && m > t.ratio) || (t.op == "≥" && m < t.ratio) {
				met = false
			}
		}
	}
	if t.abs > 0 {
		known = true
		if a.mid > t.abs {
			met = false
		}
	}
	if t.frac > 0 {
		if l, ok := w.summarise(sideLimit); ok && l.mid > 0 {
			known = true
			if a.mid < t.frac*l.mid {
				met = false
			}
		}
	}
	switch {
	case !known:
		return ""
	case met:
		return "met"
	}
	return "**missed**"
}

// format prints a figure with precision that suits its size.
func format(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// report writes the results as a markdown table, then any failures.
func (r *results) report(w io.Writer, nameA, nameB string, haveB bool) {
	fmt.Fprintf(w, "| metric | unit | %s p50 | %s p99 |", nameA, nameA)
	if haveB {
		fmt.Fprintf(w, " %s p50 | %s p99 | ratio %s/%s (median) | ratio range | target | verdict |", nameB, nameB, nameA, nameB)
	} else {
		fmt.Fprintf(w, " absolute target |")
	}
	fmt.Fprintf(w, " limit (no server) | %s/limit |\n", nameA)
	cols := 7
	if haveB {
		cols += 5
	}
	fmt.Fprintln(w, "|"+strings.Repeat("---|", cols))
	for _, row := range r.rows {
		a, okA := row.summarise(sideA)
		b, okB := row.summarise(sideB)
		_, okL := row.summarise(sideLimit)
		if !okA && !okB && !okL && row.errs[0] == "" && row.errs[1] == "" {
			continue
		}
		cell := func(s summary, ok bool, errText string) (string, string) {
			if !ok {
				if errText != "" {
					return "error", "–"
				}
				return "–", "–"
			}
			if row.kind == latency {
				return format(s.mid), format(s.p99)
			}
			return format(s.mid), "–"
		}
		a50, a99 := cell(a, okA, row.errs[0])
		fmt.Fprintf(w, "| %s | %s | %s | %s |", row.title, row.unit, a50, a99)
		if haveB {
			b50, b99 := cell(b, okB, row.errs[1])
			ratio, rng := "–", "–"
			if rs := row.ratios(); len(rs) > 0 {
				ratio = format(median(rs)) + "×"
				rng = format(slices.Min(rs)) + "–" + format(slices.Max(rs))
			}
			fmt.Fprintf(w, " %s | %s | %s | %s | %s | %s |", b50, b99, ratio, rng, row.target, row.verdict())
		} else {
			fmt.Fprintf(w, " %s |", row.verdictAbsOnly())
		}
		lim, frac := "–", "–"
		if l, ok := row.summarise(sideLimit); ok {
			lim = format(l.mid)
			if okA && l.mid != 0 {
				frac = fmt.Sprintf("%.0f%%", 100*a.mid/l.mid)
			}
		}
		fmt.Fprintf(w, " %s | %s |\n", lim, frac)
	}
	var fails []string
	for _, row := range r.rows {
		for s, e := range row.errs {
			if e != "" {
				name := nameA
				if s == 1 {
					name = nameB
				}
				fails = append(fails, fmt.Sprintf("- %s, %s: %s", row.title, name, e))
			}
		}
	}
	if len(fails) > 0 {
		fmt.Fprintln(w, "\nFailures:")
		fmt.Fprintln(w, strings.Join(fails, "\n"))
	}
}

// verdictAbsOnly is the one-server verdict column: only absolute targets can be judged.
func (w *row) verdictAbsOnly() string {
	if w.target.abs == 0 {
		return ""
	}
	if a, ok := w.summarise(sideA); ok && a.mid <= w.target.abs {
		return fmt.Sprintf("≤ %g: met", w.target.abs)
	} else if ok {
		return fmt.Sprintf("≤ %g: **missed**", w.target.abs)
	}
	return ""
}

// failed reports whether any row of server s failed.
func (r *results) failed(s side) bool {
	for _, row := range r.rows {
		if row.errs[s] != "" {
			return true
		}
	}
	return false
}
