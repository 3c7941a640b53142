package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// donutChart is a server-drawn SVG ring: one arc per category, with a hover
// title giving each exact value.
type donutChart struct {
	Label, Category string // Category is what the legend's first column lists: "Tool"
	Total           int64
	Segments        []donutSegment
}

// donutSegment is one arc, drawn as a dashed circle stroke.
type donutSegment struct {
	Name           string
	Value          int64
	Percent, Color string
	Dash, Offset   string // the stroke's dash array and offset
}

// Chart geometry shared with the templates. The line chart's SVG, stretched
// to its card, has abstract coordinates: x to plotWidth, y (down) to plotHeight.
const (
	donutRadius = 60.0
	plotWidth   = 1000.0
	plotHeight  = 200.0
)

// toolPalette colours categories such as tools; muted so the console stays
// quiet, distinct enough to tell neighbours apart.
var toolPalette = []string{"#3b9f9b", "#587fc0", "#8167b5", "#ae6c92", "#b36a6d", "#a47c47", "#7d914b", "#6d899a", "#507a74", "#8b769f", "#9a7860", "#627b68", "#4f88a8", "#a0704f"}

// outcomePalette keeps green for success and the category colours of
// errorCategories for failures.
var outcomePalette = func() map[string]string {
	p := map[string]string{successLabel: successColor, unknownErrorLabel: "#8a6d6d"}
	for _, c := range errorCategories {
		p[c.Label] = c.Color
	}
	return p
}()

// successColor is the green of successful calls.
const successColor = "#4f8a2a"

// newDonut builds a ring from counts, ranked by rankCounts. A category's
// colour is palette's, else toolPalette's by its place in name order, so it
// survives re-ranking.
func newDonut(label string, counts map[string]int64, palette map[string]string) donutChart {
	names, total := rankCounts(counts)
	d := donutChart{Label: label, Total: total}
	byName := slices.Sorted(slices.Values(names))
	circumference := 2 * math.Pi * donutRadius
	offset := 0.0
	for _, name := range names {
		n := counts[name]
		i, _ := slices.BinarySearch(byName, name)
		length := circumference * float64(n) / float64(d.Total)
		d.Segments = append(d.Segments, donutSegment{
			Name: name, Value: n, Percent: trimPercent(float64(n) * 100 / float64(d.Total)),
			Color:  cmp.Or(palette[name], toolPalette[i%len(toolPalette)]),
			Dash:   fmt.Sprintf("%.3f %.3f", length, circumference-length),
			Offset: fmt.Sprintf("%.3f", -offset),
		})
		offset += length
	}
	return d
}

// rankCounts lists the categories with a positive count, biggest first
// (ties by name, ignoring case), and sums their counts.
func rankCounts(counts map[string]int64) (names []string, total int64) {
	for name, n := range counts {
		if n > 0 {
			names = append(names, name)
			total += n
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(strings.ToLower(a), strings.ToLower(b)), strings.Compare(a, b))
	})
	return names, total
}

// trimPercent renders 50 as "50%" and 12.34 as "12.3%".
func trimPercent(p float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", p), ".0") + "%"
}

// axisTick is one labelled gridline or time label.
type axisTick struct {
	Y, Label, ISO, Fmt string
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// lineChart is a server-drawn SVG time series with an area fill.
type lineChart struct {
	Label         string
	Line, Area    string // SVG paths
	Points        []linePoint
	Ticks, XTicks []axisTick // value gridlines and time labels
	Count         int
	// YLabels are the tick labels top first, as the HTML axis lists them.
	YLabels []string
}

// linePoint is one bucket with its hover title.
type linePoint struct {
	X, Y               string
	Title, ISO, Suffix string
}

// maxFilledBuckets bounds gap filling; sparser series keep only real points.
const maxFilledBuckets = 400

// newLineChart plots calls per bucket, filling empty buckets with zero when
// the range is small enough, so quiet periods show as such.
func (o *observer) newLineChart(label string, byTime map[int64]int64, seconds int64, f auditFilter, now time.Time) lineChart {
	c := lineChart{Label: label}
	if len(byTime) == 0 {
		return c
	}
	keys := chartBuckets(byTime, seconds, f, now)
	maxV := slices.Max(slices.Collect(maps.Values(byTime))) // the filled buckets are zero
	top, step := niceScale(maxV, 5)
	for v := int64(0); v <= top; v += step {
		c.Ticks = append(c.Ticks, axisTick{Y: f1(plotHeight - plotHeight*float64(v)/float64(top)), Label: fmt.Sprint(v)})
		c.YLabels = append([]string{fmt.Sprint(v)}, c.YLabels...)
	}
	c.Count = len(keys)
	var line strings.Builder
	for i, k := range keys {
		x, y := lineX(i, len(keys)), plotHeight-plotHeight*float64(byTime[k])/float64(top)
		fmt.Fprintf(&line, "L%.1f %.1f ", x, y)
		t := time.Unix(k, 0).In(o.location)
		suffix := fmt.Sprintf(": %d calls", byTime[k])
		c.Points = append(c.Points, linePoint{X: f1(x), Y: f1(y), Title: t.Format("2006-01-02 15:04:05 MST") + suffix,
			ISO: t.UTC().Format(time.RFC3339), Suffix: suffix})
	}
	path := strings.TrimSpace(line.String())
	c.Line = "M" + path[1:]
	first, last := lineX(0, len(keys)), lineX(len(keys)-1, len(keys))
	c.Area = fmt.Sprintf("M%.1f %.1f %s L%.1f %.1f Z", first, plotHeight, path, last, plotHeight)
	c.XTicks = o.timeTicks(keys, seconds)
	return c
}

// chartBuckets lists the buckets to plot, oldest first: those with calls, or
// all of the filtered range when few enough, started by auditBucketStart so
// they line up with the stored ones.
func chartBuckets(byTime map[int64]int64, seconds int64, f auditFilter, now time.Time) []int64 {
	keys := slices.Sorted(maps.Keys(byTime))
	first, last := keys[0], keys[len(keys)-1]
	if !f.From.IsZero() {
		first = min(first, auditBucketStart(f.From, seconds))
		last = max(last, auditBucketStart(cmp.Or(f.To, now), seconds))
	}
	if (last-first)/seconds+1 > maxFilledBuckets {
		return keys
	}
	keys = keys[:0]
	for b := first; b <= last; b += seconds {
		keys = append(keys, b)
	}
	return keys
}

// lineX is the x coordinate of point i of n; a lone point sits mid-plot.
func lineX(i, n int) float64 {
	if n == 1 {
		return plotWidth / 2
	}
	return plotWidth * float64(i) / float64(n-1)
}

// timeTicks labels up to five evenly spaced buckets, in dates or minutes; an
// odd count lets a phone show every other label, still evenly spaced.
func (o *observer) timeTicks(keys []int64, seconds int64) []axisTick {
	labels := min(5, len(keys))
	ticks := make([]axisTick, 0, labels)
	layout, format := "01-02 15:04", "minute"
	if seconds >= 86400 {
		layout, format = "2006-01-02", "date"
	}
	for j := range labels {
		t := time.Unix(keys[j*(len(keys)-1)/max(labels-1, 1)], 0)
		ticks = append(ticks, axisTick{Label: t.In(o.location).Format(layout), ISO: t.UTC().Format(time.RFC3339), Fmt: format})
	}
	return ticks
}

// topList is a ranked horizontal bar chart on an axis ending at a round
// number; each bar is a tiny SVG, as the CSP allows no inline styles.
type topList struct {
	Label string
	Noun  string // what is counted, for the hover text: "calls"
	Total int64
	Rows  []topRow
	Ticks []string // evenly spaced axis labels from 0 to the axis maximum
	Grid  []string // x of each inner tick in the 0–100 bar coordinates
}

// topRow is one ranked category.
type topRow struct {
	Name    string
	Value   int64
	Percent string
	Width   string // bar length in percent of the axis, for an SVG width
	Other   int    // how many categories an "Other" row sums; 0 otherwise
}

// maxTopRows bounds a top list, whose tail one "Other" row sums.
const maxTopRows = 25

// newTopList ranks counts with rankCounts and scales the bars to a nice axis.
func newTopList(label, noun string, counts map[string]int64) topList {
	names, total := rankCounts(counts)
	l := topList{Label: label, Noun: noun, Total: total}
	l.Rows = mapSlice(names, func(name string) topRow { return topRow{Name: name, Value: counts[name]} })
	if len(l.Rows) > maxTopRows {
		other := topRow{Other: len(l.Rows) - (maxTopRows - 1)}
		for _, r := range l.Rows[maxTopRows-1:] {
			other.Value += r.Value
		}
		other.Name = fmt.Sprintf("Other (%d more)", other.Other)
		l.Rows = append(l.Rows[:maxTopRows-1], other)
	}
	var most int64
	for _, r := range l.Rows {
		most = max(most, r.Value)
	}
	top, step := niceScale(most, 5)
	for v := int64(0); v <= top; v += step {
		l.Ticks = append(l.Ticks, fmt.Sprint(v))
		if v > 0 && v < top {
			l.Grid = append(l.Grid, fmt.Sprintf("%.2f", float64(v)*100/float64(top)))
		}
	}
	for i := range l.Rows {
		r := &l.Rows[i]
		r.Percent = trimPercent(float64(r.Value) * 100 / float64(l.Total))
		r.Width = fmt.Sprintf("%.2f", float64(r.Value)*100/float64(top))
	}
	return l
}

// niceScale returns the smallest round axis maximum at or above maxV and its
// step, in at most maxTicks steps of 1, 2, 2.5 or 5 × 10ⁿ: 123 gives 125.
func niceScale(maxV int64, maxTicks int) (top, step int64) {
	maxV = max(maxV, 1)
	for pow := int64(1); ; pow *= 10 {
		for _, s := range []int64{pow, 2 * pow, 5 * pow / 2, 5 * pow} { // 2.5 × 1 truncates to 2: tried twice
			if n := (maxV + s - 1) / s; n <= int64(maxTicks) {
				return n * s, s
			}
		}
	}
}
