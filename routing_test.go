package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestHasMention(t *testing.T) {
	for _, tt := range []struct {
		text, id string
		want     bool
	}{
		{"@bob", "bob", true},
		{"hi @bob", "bob", true},
		{"hi @Bob, there", "bob", true},
		{"@bob.", "bob", true},
		{"@bob!", "bob", true},
		{"@bob?", "bob", true},
		{"@bob;", "bob", true},
		{"@bob:", "bob", true},
		{"@bob\tx", "bob", true},
		{"@bob\nx", "bob", true},
		{"@bobby", "bob", false},
		{"@bob-1", "bob", false},
		{"@bob's", "bob", false},
		{"(cc @bob)", "bob", false},   // as the original: ")" ends no mention
		{"@bob\u00a0x", "bob", false}, // nor does a no-break space
		{"email bob@bob.com", "bob", true},
		{"@bobby and @bob", "bob", true},
		{"bob", "bob", false},
		{"@ALL hands", "all", true},
		{"@allison", "all", false},
		{"@carol/1!", "carol/1", true},
		{"@ünïcode ok", "ÜNÏCODE", true},
	} {
		if got := hasMention(strings.ToLower(tt.text), tt.id); got != tt.want {
			t.Errorf("hasMention(%q, %q): got %v; want %v", tt.text, tt.id, got, tt.want)
		}
	}
}

func TestRoute(t *testing.T) {
	others := []recipient{{"b", "Bob"}, {"c", "Carol"}, {"d", "dave"}}
	for _, tt := range []struct {
		name, text, priority string
		wake                 []string
		want                 routing
	}{
		{"fallback", "hello", "normal", nil, routing{[]string{}, []target{{"b", "fallback"}, {"c", "fallback"}, {"d", "fallback"}}, "fallback"}},
		{"mention by name", "ping @carol", "normal", nil, routing{[]string{"c"}, []target{{"c", "mentioned"}}, "mentioned"}},
		{"mention by id", "ping @d", "high", nil, routing{[]string{"d"}, []target{{"d", "mentioned"}}, "mentioned"}},
		{"mentions keep member order", "@dave @bob", "normal", nil, routing{[]string{"b", "d"}, []target{{"b", "mentioned"}, {"d", "mentioned"}}, "mentioned"}},
		{"all", "@all", "low", nil, routing{[]string{"b", "c", "d"}, []target{{"b", "mentioned"}, {"c", "mentioned"}, {"d", "mentioned"}}, "mentioned"}},
		{"urgent beats mentions", "@bob now", "urgent", nil, routing{[]string{"b"}, []target{{"b", "urgent"}, {"c", "urgent"}, {"d", "urgent"}}, "urgent"}},
		{"explicit beats urgent", "@bob now", "urgent", []string{"d", "x"}, routing{[]string{"b"}, []target{{"d", "explicit"}}, "explicit"}},
		{"unknown explicit ids fall through", "@bob", "normal", []string{"x"}, routing{[]string{"b"}, []target{{"b", "mentioned"}}, "mentioned"}},
		{"explicit in member order", "x", "normal", []string{"d", "b"}, routing{[]string{}, []target{{"b", "explicit"}, {"d", "explicit"}}, "explicit"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := route(others, tt.text, tt.priority, tt.wake); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
	// The original lowercases "@ΑΣ\u055f.Α" with a medial σ, so the name ending "ας\u055f" is not mentioned.
	if got := route([]recipient{{"s", "ΑΣ\u055f"}}, "@ΑΣ\u055f.Α", "normal", nil); got.reason != "fallback" {
		t.Errorf("a Σ before U+055F and a letter: got %+v; want no mention, as Python's lower() reads it", got)
	}
	if got := route(nil, "@all", "urgent", nil); len(got.targets) != 0 || got.reason != "urgent" {
		t.Errorf("alone in a group: got %+v; want no targets", got)
	}
}
