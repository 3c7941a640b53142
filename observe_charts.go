package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// donutChart is a server-drawn SVG ring: one arc per category, with a hover
// title giving each exact value.
type donutChart struct {
	Label    string
	Total    int64
	Segments []donutSegment
}

// donutSegment is one arc, drawn as a dashed circle stroke.
type donutSegment struct {
	Name    string
	Value   int64
	Percent string
	Color   string
	Dash    string
	Offset  string
}

// chart geometry shared by the templates.
const (
	donutRadius = 60.0
	chartWidth  = 1200.0
	chartHeight = 220.0
	padLeft     = 44.0
	padRight    = 16.0
	padTop      = 12.0
	padBottom   = 30.0
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

// newDonut builds a ring from counts, categories sorted by name for a
// stable legend. A category takes its colour from palette when listed there,
// else from toolPalette by position.
func newDonut(label string, counts map[string]int64, palette map[string]string) donutChart {
	d := donutChart{Label: label}
	names := make([]string, 0, len(counts))
	for name, n := range counts {
		if n > 0 {
			names = append(names, name)
			d.Total += n
		}
	}
	sort.Strings(names)
	circumference := 2 * math.Pi * donutRadius
	offset := 0.0
	for i, name := range names {
		n := counts[name]
		color := toolPalette[i%len(toolPalette)]
		if c, ok := palette[name]; ok {
			color = c
		}
		length := circumference * float64(n) / float64(d.Total)
		d.Segments = append(d.Segments, donutSegment{
			Name: name, Value: n, Percent: trimPercent(float64(n) * 100 / float64(d.Total)), Color: color,
			Dash:   fmt.Sprintf("%.3f %.3f", length, circumference-length),
			Offset: fmt.Sprintf("%.3f", -offset),
		})
		offset += length
	}
	return d
}

// trimPercent renders 50 as "50%" and 12.34 as "12.3%".
func trimPercent(p float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", p), ".0") + "%"
}

// axisTick is one labelled gridline.
type axisTick struct {
	Y      string
	X      string
	Label  string
	ISO    string
	Fmt    string
	Anchor string
}

// barChart is a server-drawn SVG column chart.
type barChart struct {
	Label string
	Total int64
	Bars  []bar
	Ticks []axisTick
}

// bar is one column with its label and exact value for hover.
type bar struct {
	X, Y, W, H string
	LabelX     string
	Name       string
	Short      string
	Value      int64
}

// maxBars bounds the caller chart; the rest are summed into "Other".
const maxBars = 24

func newBarChart(label string, counts map[string]int64) barChart {
	c := barChart{Label: label}
	type kv struct {
		k string
		v int64
	}
	var items []kv
	for k, v := range counts {
		items = append(items, kv{k, v})
		c.Total += v
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].v != items[j].v {
			return items[i].v > items[j].v
		}
		return items[i].k < items[j].k
	})
	if len(items) > maxBars {
		var rest int64
		for _, it := range items[maxBars-1:] {
			rest += it.v
		}
		items = append(items[:maxBars-1], kv{"Other", rest})
	}
	sort.SliceStable(items, func(i, j int) bool { return strings.ToLower(items[i].k) < strings.ToLower(items[j].k) })
	var maxV int64
	for _, it := range items {
		maxV = max(maxV, it.v)
	}
	top, ticks := niceAxis(maxV)
	c.Ticks = ticks
	if len(items) == 0 {
		return c
	}
	plotW := chartWidth - padLeft - padRight
	plotH := chartHeight - padTop - padBottom
	slot := plotW / float64(len(items))
	w := math.Min(42, slot*0.6)
	for i, it := range items {
		h := plotH * float64(it.v) / float64(top)
		x := padLeft + slot*float64(i) + (slot-w)/2
		short := it.k
		if r := []rune(short); len(r) > 22 {
			short = string(r[:21]) + "…"
		}
		c.Bars = append(c.Bars, bar{
			X: f1(x), Y: f1(padTop + plotH - h), W: f1(w), H: f1(h), LabelX: f1(x + w/2),
			Name: it.k, Short: short, Value: it.v,
		})
	}
	return c
}

// niceAxis rounds a maximum up to a readable scale and returns five ticks.
func niceAxis(maxV int64) (int64, []axisTick) {
	if maxV < 5 {
		maxV = 5
	}
	step := int64(math.Pow(10, math.Floor(math.Log10(float64(maxV)/5))))
	for _, m := range []int64{1, 2, 5, 10} {
		if step*m*5 >= maxV {
			step *= m
			break
		}
	}
	top := step * 5
	plotH := chartHeight - padTop - padBottom
	ticks := make([]axisTick, 0, 6)
	for i := int64(0); i <= 5; i++ {
		y := padTop + plotH - plotH*float64(i*step)/float64(top)
		ticks = append(ticks, axisTick{Y: f1(y), Label: fmt.Sprint(i * step)})
	}
	return top, ticks
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// lineChart is a server-drawn SVG time series with an area fill.
type lineChart struct {
	Label  string
	Line   string
	Area   string
	Points []linePoint
	Ticks  []axisTick
	XTicks []axisTick
	Count  int
}

// linePoint is one bucket with its hover title.
type linePoint struct {
	X, Y   string
	Title  string
	ISO    string
	Suffix string
}

// maxFilledBuckets bounds gap filling; sparser series keep only real points.
const maxFilledBuckets = 400

// newLineChart plots calls per bucket, filling empty buckets with zero when
// the range is small enough, so quiet periods show as such.
func (o *observer) newLineChart(label string, byTime map[int64]int64, seconds int64, f auditFilter, now time.Time) lineChart {
	c := lineChart{Label: label}
	if len(byTime) == 0 {
		_, c.Ticks = niceAxis(0)
		return c
	}
	keys := chartBuckets(byTime, seconds, f, now)
	var maxV int64
	for _, k := range keys {
		maxV = max(maxV, byTime[k])
	}
	top, ticks := niceAxis(maxV)
	c.Ticks = ticks
	c.Count = len(keys)
	plotH := chartHeight - padTop - padBottom
	var line, area strings.Builder
	base := padTop + plotH
	for i, k := range keys {
		x, y := lineX(i, len(keys)), base-plotH*float64(byTime[k])/float64(top)
		cmd := "L"
		if i == 0 {
			cmd = "M"
			fmt.Fprintf(&area, "M%.1f %.1f ", x, base)
		}
		fmt.Fprintf(&line, "%s%.1f %.1f ", cmd, x, y)
		fmt.Fprintf(&area, "L%.1f %.1f ", x, y)
		t := time.Unix(k, 0).In(o.location)
		suffix := fmt.Sprintf(": %d calls", byTime[k])
		c.Points = append(c.Points, linePoint{X: f1(x), Y: f1(y), Title: t.Format("2006-01-02 15:04:05 MST") + suffix,
			ISO: t.UTC().Format(time.RFC3339), Suffix: suffix})
	}
	fmt.Fprintf(&area, "L%.1f %.1f Z", lineX(len(keys)-1, len(keys)), base)
	c.Line, c.Area = strings.TrimSpace(line.String()), area.String()
	c.XTicks = o.timeTicks(keys, seconds)
	return c
}

// chartBuckets lists the buckets to plot, oldest first: the buckets with
// calls, or every bucket of the filtered range when there are few enough.
// Bucket starts use auditBucketStart, as the rollups do, so the range's
// first and last buckets line up with the stored ones also before 1970.
func chartBuckets(byTime map[int64]int64, seconds int64, f auditFilter, now time.Time) []int64 {
	keys := make([]int64, 0, len(byTime))
	for k := range byTime {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	first, last := keys[0], keys[len(keys)-1]
	if !f.From.IsZero() {
		first = min(first, auditBucketStart(f.From, seconds))
		end := now
		if !f.To.IsZero() {
			end = f.To
		}
		last = max(last, auditBucketStart(end, seconds))
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
	plotW := chartWidth - padLeft - padRight
	if n == 1 {
		return padLeft + plotW/2
	}
	return padLeft + plotW*float64(i)/float64(n-1)
}

// timeTicks labels up to six evenly spaced buckets, in dates for day-wide
// buckets and in minutes otherwise.
func (o *observer) timeTicks(keys []int64, seconds int64) []axisTick {
	labels := min(6, len(keys))
	ticks := make([]axisTick, 0, labels)
	for j := range labels {
		i := 0
		if labels > 1 {
			i = j * (len(keys) - 1) / (labels - 1)
		}
		t := time.Unix(keys[i], 0)
		layout, format := "01-02 15:04", "minute"
		if seconds >= 86400 {
			layout, format = "2006-01-02", "date"
		}
		anchor := "middle"
		if labels > 1 && j == 0 {
			anchor = "start"
		} else if labels > 1 && j == labels-1 {
			anchor = "end"
		}
		ticks = append(ticks, axisTick{X: f1(lineX(i, len(keys))), Label: t.In(o.location).Format(layout),
			ISO: t.UTC().Format(time.RFC3339), Fmt: format, Anchor: anchor})
	}
	return ticks
}
