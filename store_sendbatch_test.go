package main

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSendBatchMatchesOneByOne stores the same sends once as one batch and
// once one by one, in two groups with the same members, and compares every
// row. The batch is large enough for the wake events to take several
// INSERTs (maxWakeInsert).
func TestSendBatchMatchesOneByOne(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	st.now = func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }
	const members, sends = 50, 64
	var groups [2]string
	for i := range groups {
		meta, err := st.createGroup("m0", "batch", "")
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = meta.groupID
		for m := range members {
			if err := st.joinGroup(meta.groupID, fmt.Sprintf("m%d", m), fmt.Sprintf("M%d", m)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var msgs []outgoing
	for i := range sends {
		m := outgoing{contextID: fmt.Sprintf("m%d", i%members), name: fmt.Sprintf("M%d", i%members), text: fmt.Sprintf("hello %d @m3", i), priority: "urgent"}
		if i%5 == 1 {
			m.priority = "normal"
		}
		if i == 7 {
			m.name = "impostor"
		}
		msgs = append(msgs, m)
	}
	outs, errs, err := st.sendMessages(groups[0], msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		out, err := st.sendMessage(groups[1], m)
		if (err == nil) != (errs[i] == nil) || (err == nil && (out.messageID != outs[i].messageID || !slices.Equal(out.wakeupTargets, outs[i].wakeupTargets))) {
			t.Errorf("send %d: batch got %+v (%v); alone got %+v (%v)", i, outs[i], errs[i], out, err)
		}
	}
	dump := func(g string) []string {
		db := openTestDB(t, st.groupPath(g), "ro")
		var rows []string
		for _, q := range []string{
			"SELECT * FROM messages ORDER BY id",
			"SELECT rowid, * FROM member_unread_messages ORDER BY rowid",
			"SELECT rowid, * FROM group_members ORDER BY rowid",
			"SELECT * FROM wakeup_events ORDER BY id",
			"SELECT * FROM group_message_metrics ORDER BY metric, value",
			"SELECT * FROM group_state",
		} {
			rows = append(rows, q)
			rows = append(rows, queryRows(t, db, q)...)
		}
		return rows
	}
	batch, alone := dump(groups[0]), dump(groups[1])
	if !slices.Equal(batch, alone) {
		for i := range min(len(batch), len(alone)) {
			if batch[i] != alone[i] {
				t.Fatalf("rows differ at %d: batch %q, alone %q", i, batch[i], alone[i])
			}
		}
		t.Fatalf("row counts differ: batch %d, alone %d", len(batch), len(alone))
	}
	var wakes int
	if err := openTestDB(t, st.groupPath(groups[0]), "ro").QueryRow("SELECT COUNT(*) FROM wakeup_events").Scan(&wakes); err != nil || wakes <= maxWakeInsert {
		t.Errorf("got %d wake events (%v); want more than %d, to cover split INSERTs", wakes, err, maxWakeInsert)
	}
}
