package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestMessagePagination(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := fx.group("Paged", "", now, fixtureMember{"w", "Writer"})
	exact := fx.group("Exact", "", now, fixtureMember{"w", "Writer"})
	var msgs []fixtureMessage
	for i := 0; i < 205; i++ {
		msgs = append(msgs, fixtureMessage{Sender: "w", SenderName: "Writer", Content: fmt.Sprintf("m%d", i+1), At: now.Add(time.Duration(i) * time.Second)})
	}
	fx.messages(id, msgs...)
	fx.messages(exact, msgs[:100]...)
	obs := newTestObserver(t, fx.dir, time.Second)
	idPattern := regexp.MustCompile(`data-message-id="(\d+)"`)
	cursorPattern := regexp.MustCompile(`older_than_message_id=(\d+)`)
	seen := map[string]bool{}
	var order []string
	path := "/fragments/messages?group_id=" + id
	var pages []int
	for path != "" {
		code, body, _ := get(t, obs, path)
		if code != 200 {
			t.Fatalf("%s got %d", path, code)
		}
		var page []string
		for _, m := range idPattern.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Errorf("message %s shown twice", m[1])
			}
			seen[m[1]] = true
			page = append(page, m[1])
		}
		order = append(page, order...)
		pages = append(pages, len(page))
		path = ""
		if m := cursorPattern.FindStringSubmatch(body); m != nil {
			path = "/fragments/messages?group_id=" + id + "&older_than_message_id=" + m[1]
		}
	}
	if fmt.Sprint(pages) != "[100 100 5]" {
		t.Errorf("got page sizes %v; want [100 100 5]", pages)
	}
	for i, got := range order {
		if want := fmt.Sprint(i + 1); got != want {
			t.Fatalf("position %d holds message %s; want %s (no gaps, chronological)", i, got, want)
		}
	}
	_, body, _ := get(t, obs, "/fragments/messages?group_id="+exact)
	if strings.Contains(body, "Load older") || len(idPattern.FindAllString(body, -1)) != 100 {
		t.Errorf("a group of exactly 100 messages got a Load older button or a wrong page")
	}
}
