package main

import (
	"bytes"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
)

// channelServer returns a session started with CROSSTALK_CHANNELS=1 and its
// stdout, in a group "team" that alice created and bob joined.
func channelServer(t *testing.T, channels bool) (*server, *bytes.Buffer, string) {
	t.Helper()
	st := newTestStore(t, t.TempDir())
	var out bytes.Buffer
	cfg := newServerConfig(version, time.Hour)
	cfg.channels = channels
	s := newServer(st, &out, cfg)
	t.Cleanup(func() { s.subs.close() })
	initializeSession(t, s)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustJoin(t, s, g, "bob", "Bob")
	return s, &out, g
}

// channelLines returns the channel notifications written to out.
func channelLines(out *bytes.Buffer) []string {
	var got []string
	for line := range strings.SplitSeq(out.String(), "\n") {
		if strings.Contains(line, channelMethod) {
			got = append(got, line)
		}
	}
	out.Reset()
	return got
}

// TestChannelPush checks the wire form of a channel event, that each wake
// event is pushed once and recorded as delivered by channel while its
// message stays unread, and that a session without channels gets none.
func TestChannelPush(t *testing.T) {
	for _, channels := range []bool{true, false} {
		t.Run(map[bool]string{true: "channels", false: "without"}[channels], func(t *testing.T) {
			s, out, g := channelServer(t, channels)
			mustSend(t, s, g, "alice", "Alice", "hey @bob", map[string]any{"priority": "high"})
			s.subs.poll(t.Context(), nil)
			want := []string{`{"jsonrpc": "2.0", "method": "notifications/claude/channel", "params": {"content": "hey @bob", "meta": ` +
				`{"group_id": "` + g + `", "group_name": "team", "from": "Alice", "message_id": "1", "priority": "high"}}}`}
			if !channels {
				want = nil
			}
			if got := channelLines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("first poll:\ngot  %q\nwant %q", got, want)
			}
			clockOf(s.store).skewBy(wakeupReminderInterval + time.Second)
			s.subs.poll(t.Context(), nil)
			if !strings.Contains(out.String(), "notifications/resources/updated") {
				t.Errorf("reminder: got %q; want a resources/updated reminder", out.String())
			}
			if got := channelLines(out); len(got) != 0 {
				t.Errorf("reminder: got channel events %q; want none, the model saw it once", got)
			}
			var via string
			var unread int
			if err := s.store.withGroup(g, func(db *sql.DB) error {
				if err := db.QueryRow("SELECT COUNT(*) FROM member_unread_messages WHERE context_id = 'bob'").Scan(&unread); err != nil {
					return err
				}
				err := db.QueryRow("SELECT delivered_via FROM wakeup_deliveries WHERE context_id = 'bob'").Scan(&via)
				if err != nil && !strings.Contains(err.Error(), "no such table") {
					return err
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if wantVia := map[bool]string{true: viaChannel}[channels]; via != wantVia || unread != 1 {
				t.Errorf("got via %q and %d unread; want via %q and the message still unread", via, unread, wantVia)
			}
			claimed, err := s.store.claimForHook(g, "bob", []int64{1})
			if err != nil || claimed[1] == channels {
				t.Errorf("hook claim after the push: got %v, %v; want it claimable only without channels", claimed, err)
			}
			if n, err := s.store.claimWaitWakeup(membership{groupID: g}, "bob", time.Now().Add(time.Hour), 1<<20); err != nil || n != nil {
				t.Errorf("waiter claim after hook or channel: got %+v, %v; want nothing left", n, err)
			}
		})
	}
}

// TestChannelInitialize checks that only a session with channels declares
// the capability and the instructions.
func TestChannelInitialize(t *testing.T) {
	for _, channels := range []bool{true, false} {
		cfg := newServerConfig(version, time.Hour)
		cfg.channels = channels
		s := newServer(newTestStore(t, t.TempDir()), &bytes.Buffer{}, cfg)
		got := exchangeLine(t, s, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`)
		s.subs.close()
		declared := strings.Contains(got, `"experimental": {"claude/channel": {}}`) && strings.Contains(got, `"instructions": "Messages sent to you`)
		if declared != channels || strings.Contains(got, "claude/channel") != channels {
			t.Errorf("channels %v: got %s", channels, got)
		}
	}
}

// TestChannelContentBound checks that a long message is cut near 8 KiB
// with a note how to read the rest.
func TestChannelContentBound(t *testing.T) {
	tests := []struct {
		text    string
		wantCut bool
	}{
		{strings.Repeat("é", channelMaxBytes/2), false},
		{strings.Repeat("é", channelMaxBytes/2) + "x", true},
	}
	for _, tt := range tests {
		content := channelParams(&wakeNotice{text: tt.text}).get("content").(string)
		cut := strings.Contains(content, "get_unread_messages shows the whole message")
		if cut != tt.wantCut || len(content) > channelMaxBytes+100 || cut == strings.HasPrefix(content, tt.text) {
			t.Errorf("%d bytes: got %d bytes, cut %v; want cut %v within about 8 KiB", len(tt.text), len(content), cut, tt.wantCut)
		}
	}
}

func TestChannelsEnabled(t *testing.T) {
	for value, want := range map[string]bool{"1": true, " 1\n": true, "": false, "0": false, "true": false} {
		if got := channelsEnabled(value); got != want {
			t.Errorf("channelsEnabled(%q): got %v; want %v", value, got, want)
		}
	}
}

// TestChannelClaimFailure makes the channel claim fail in its write (as a
// full disk would): nothing is pushed, since no delivery was recorded and
// a waiter would deliver the message again, and once the failure is over
// the event is pushed at the next check after the renotify gap, not at the
// 300 s reminder.
func TestChannelClaimFailure(t *testing.T) {
	s, out, g := channelServer(t, true)
	db := openTestDB(t, s.store.groupPath(g), "rw")
	for _, q := range []string{deliveriesTable,
		"CREATE TRIGGER failing_claim BEFORE INSERT ON wakeup_deliveries BEGIN SELECT RAISE(ABORT, 'disk full'); END"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	mustSend(t, s, g, "alice", "Alice", "hey @bob", nil)
	s.subs.poll(t.Context(), nil)
	if got := channelLines(out); len(got) != 0 {
		t.Fatalf("pushed despite the failed claim: %q", got)
	}
	if _, err := db.Exec("DROP TRIGGER failing_claim"); err != nil {
		t.Fatal(err)
	}
	clockOf(s.store).skewBy(10 * wakeupRenotifyGap)
	s.subs.poll(t.Context(), nil)
	if got := channelLines(out); len(got) != 1 {
		t.Fatalf("after the failure, past the renotify gap: got %d channel events; want the message pushed", len(got))
	}
}

// TestChannelPushBeforeReminders shows that a new message is pushed at the
// first poll even when a reminder of an older one, pushed and left unread
// as channel messages are, falls due at the same time: the poller notifies
// one wake event per renotify gap, so serving reminders first delayed the
// push, without end once more than 300 of them were pending.
func TestChannelPushBeforeReminders(t *testing.T) {
	s, out, g := channelServer(t, true)
	mustSend(t, s, g, "alice", "Alice", "@bob one", nil)
	s.subs.poll(t.Context(), nil)
	if got := channelLines(out); len(got) != 1 {
		t.Fatalf("first message: got %d channel events; want 1", len(got))
	}
	clockOf(s.store).skewBy(wakeupReminderInterval + time.Second)
	mustSend(t, s, g, "alice", "Alice", "@bob two", nil)
	s.subs.poll(t.Context(), nil)
	got := channelLines(out)
	if len(got) != 1 || !strings.Contains(got[0], `"content": "@bob two"`) {
		t.Errorf("with a reminder due: got channel events %q; want the new message pushed", got)
	}
}

// TestChannelWriteFailure has the channel event's write fail after the
// resources/updated before it was written, as when the client exits between
// the two: the claim is released, so that a hook or waiter still delivers
// the message, and the event stays due, so that the push is tried again
// after the renotify gap.
func TestChannelWriteFailure(t *testing.T) {
	s, _, g := channelServer(t, true)
	broken := true
	var pushed []object
	m := newSubscriptions(s.store, time.Hour, func(method string, params object) error {
		if method != channelMethod {
			return nil
		}
		if broken {
			return errors.New("broken pipe")
		}
		pushed = append(pushed, params)
		return nil
	})
	t.Cleanup(m.close)
	m.channels = true
	uri := wakeupURI(g, "bob")
	m.authorize(uri)
	if err := m.subscribe(uri); err != nil {
		t.Fatal(err)
	}
	mustSend(t, s, g, "alice", "Alice", "hey @bob", nil)
	m.poll(t.Context(), nil)
	if claimed, err := s.store.claimForHook(g, "bob", []int64{1}); err != nil || !claimed[1] {
		t.Errorf("hook claim after a failed push: got %v, %v; want the message, which reached no one", claimed, err)
	}
	if err := s.store.releaseClaim(g, "bob", viaHook, []int64{1}); err != nil {
		t.Fatal(err)
	}
	broken = false
	clockOf(s.store).skewBy(10 * wakeupRenotifyGap)
	m.poll(t.Context(), nil)
	if len(pushed) != 1 {
		t.Errorf("after the failure, past the renotify gap: got %d channel events; want the message pushed", len(pushed))
	}
}
