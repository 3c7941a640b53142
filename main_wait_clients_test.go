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
