package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// exitClientGone is the exit status when the client closed its end of
// stdout: the session ends like EOF (queued audit rows are written), but
// the answers since then were lost, so it is not a clean exit.
const exitClientGone = 3

// errOutputClosed marks a failed write of an answer: the client closed
// stdout (EPIPE) or it broke otherwise. Either way nothing can reach the
// client any more, so the session ends as on EOF.
var errOutputClosed = errors.New("cannot write to stdout")

// maxMessageBytesVar limits send_message's text, in bytes of UTF-8.
const maxMessageBytesVar = "CROSSTALK_MAX_MESSAGE_BYTES"

// messageByteLimit is CROSSTALK_MAX_MESSAGE_BYTES, read once at start-up by
// runStdio; 0 means no limit. It is process configuration that parseSend,
// a pure function shared by the handler and group commit, consults.
var messageByteLimit int

// messageLimitFromEnv validates CROSSTALK_MAX_MESSAGE_BYTES: unset or empty
// means no limit; anything but a positive whole number is a start-up error.
func messageLimitFromEnv() (int, error) {
	v := os.Getenv(maxMessageBytesVar)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s must be a positive whole number of bytes", maxMessageBytesVar)
	}
	return n, nil
}

// checkMessageSize refuses a message longer than messageByteLimit.
func checkMessageSize(text string) error {
	if messageByteLimit > 0 && len(text) > messageByteLimit {
		return validationErrorf("message is longer than %s (%d bytes).", maxMessageBytesVar, messageByteLimit)
	}
	return nil
}
