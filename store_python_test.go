package main

import (
	"testing"
	"time"
)

func TestPyJSON(t *testing.T) {
	i := int64(7)
	tests := []struct {
		in   any
		want string
	}{
		{object{{"a", 1}, {"b", []any{true, nil}}}, `{"a": 1, "b": [true, null]}`},
		{"tab\tquote\" back\\ nl\n", `"tab\tquote\" back\\ nl\n"`},
		{"é 🎉 \x01 \x7f <&>", `"\u00e9 \ud83c\udf89 \u0001 \u007f <&>"`},
		{"bad \xff byte", `"bad \ufffd byte"`},
		{stringList(nil), `[]`},
		{stringList{"a", "b"}, `["a", "b"]`},
		{&i, `7`},
		{(*string)(nil), `null`},
		{rawJSON(`"id-1"`), `"id-1"`},
	}
	for _, tt := range tests {
		if got := pyJSON(tt.in); got != tt.want {
			t.Errorf("pyJSON(%#v): got %s; want %s", tt.in, got, tt.want)
		}
	}
}

func TestPythonTextRules(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"ABC", "abc"},
		{"İpek", "i\u0307pek"},
		{"ΑΣ", "ας"},
		{"ΑΣ x", "ας x"},
		{"Σ", "σ"},
		{"ΑΣΑ", "ασα"},
		{"ΑΣ'", "ας'"},
		// U+055F is case-ignorable (Word_Break MidLetter), as Python 3.11's Unicode 14 has it.
		{"ΑΣ\u055fΑ", "ασ\u055fα"},
		{"Α\u055fΣ", "α\u055fς"},
	} {
		if got := pyLower(tt.in); got != tt.want {
			t.Errorf("pyLower(%q): got %q; want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct {
		in   string
		want bool
	}{{"", true}, {" \t\n", true}, {"\x1c\x1d\x1e\x1f", true}, {"\u00a0\u2003", true}, {"x", false}, {"\u200b", false}} {
		if got := isBlank(tt.in); got != tt.want {
			t.Errorf("isBlank(%q): got %v; want %v", tt.in, got, tt.want)
		}
	}
}

func TestFormatTimestamp(t *testing.T) {
	for _, tt := range []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 11, 29, 13, 7, 12, 245158000, time.UTC), "2026-11-29T13:07:12.245158+00:00"},
		{time.Date(2026, 11, 29, 13, 7, 12, 0, time.UTC), "2026-11-29T13:07:12+00:00"},
		{time.Date(2026, 11, 29, 13, 7, 12, 999, time.UTC), "2026-11-29T13:07:12+00:00"},
		{time.Date(2026, 11, 29, 13, 7, 12, 1000, time.UTC), "2026-11-29T13:07:12.000001+00:00"},
		{time.Date(2026, 11, 29, 14, 7, 12, 500000000, time.FixedZone("CET", 3600)), "2026-11-29T13:07:12.500000+00:00"},
	} {
		if got := formatTimestamp(tt.in); got != tt.want {
			t.Errorf("formatTimestamp(%v): got %s; want %s", tt.in, got, tt.want)
		}
	}
}
