package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestWaitEndsAtOnceUnderVSCode runs the waiter as VS Code runs the hooks
// of Claude Code's settings file: camelCase fields, and in the foreground,
// as asyncRewake is none of its hook properties. With CROSSTALK_CONTEXT_ID
// set, it must still end at once, silent and claiming nothing, or it would
// hold the session's start or stop until mail came or its timeout.
func TestWaitEndsAtOnceUnderVSCode(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	t.Setenv("CROSSTALK_CONTEXT_ID", "sess-1")
	clockOf(f.st).skewBy(-time.Second) // older than a waiter's grace
	f.sendAs(t, "@bob ping")
	var stderr bytes.Buffer
	payload := strings.NewReader(`{"sessionId": "vsc-1", "hookEventName": "Stop", "stop_hook_active": false}`)
	if code := runWait([]string{"--timeout", "20s"}, payload, io.Discard, &stderr); code != waitTimedOut || stderr.Len() != 0 {
		t.Errorf("exit %d, stderr %q; want %d and silence", code, stderr.String(), waitTimedOut)
	}
	if ds, err := deliveriesOf(f.st, f.groupID, "sess-1"); err != nil || len(ds) != 1 || ds[0].state() != "created" {
		t.Errorf("deliveries %+v (%v); want the wake event only created", ds, err)
	}
}

// TestWaitOutlivesAGroupItCannotWrite gives the member a wake event in a
// group where every claim fails, as in a read-only or full file (here a
// trigger refuses it): the waiter goes on waiting, and mail in its other
// group still wakes it.
func TestWaitOutlivesAGroupItCannotWrite(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	stuck, err := f.st.createGroup("alice-ctx", "stuck", "")
	if err != nil {
		t.Fatal(err)
	}
	clockOf(f.st).skewBy(-time.Second) // older than a waiter's grace
	for _, m := range [][2]string{{"alice-ctx", "alice"}, {"sess-1", "bob"}} {
		if err := f.st.joinGroup(stuck.groupID, m[0], m[1]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.st.sendMessage(stuck.groupID, outgoing{contextID: "alice-ctx", name: "alice", text: "@bob stuck", priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.writeGroup(stuck.groupID, func(tx groupTx) error {
		if _, err := tx.Exec(deliveriesTable); err != nil {
			return err
		}
		_, err := tx.Exec("CREATE TRIGGER refuse BEFORE INSERT ON wakeup_deliveries BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	w := newChangeWatcher(f.st.dir)
	defer w.close()
	waiter := newTestStore(t, f.st.dir) // here: a goroutine may not call t.Fatal
	got := make(chan error, 1)
	var n *wakeNotice
	go func() {
		var err error
		n, err = waitForWakeup(waiter, w, waitOptions{contextID: "sess-1", timeout: 20 * time.Second, safetyPoll: time.Second})
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // the first full check is done
	out := f.sendAs(t, "@bob still there?")
	select {
	case err := <-got:
		if err != nil || n == nil || n.groupID != f.groupID || n.messageID != out.messageID {
			t.Errorf("waiter ended with %+v (%v); want woken by message %d of %s", n, err, out.messageID, f.groupID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter did not return")
	}
}
