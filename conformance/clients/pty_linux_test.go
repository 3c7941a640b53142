package clients

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// terminal is a pseudo-terminal whose other end a child runs on, made with
// syscalls alone: Claude Code's interactive mode needs a terminal.
type terminal struct {
	master *os.File
	mu     sync.Mutex
	screen []byte // everything the child wrote
	done   chan struct{}
}

func ioctl(fd, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// startInTerminal starts cmd on a new 120x40 pseudo-terminal as its
// controlling terminal and copies what it writes into screen, answering
// the cursor-position query a terminal would.
func startInTerminal(cmd *exec.Cmd) (*terminal, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	unlock := int32(0)
	if err := ioctl(master.Fd(), syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		master.Close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	var n uint32
	if err := ioctl(master.Fd(), syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		master.Close()
		return nil, fmt.Errorf("pty number: %w", err)
	}
	size := struct{ rows, cols, x, y uint16 }{40, 120, 0, 0}
	if err := ioctl(master.Fd(), syscall.TIOCSWINSZ, unsafe.Pointer(&size)); err != nil {
		master.Close()
		return nil, fmt.Errorf("pty size: %w", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, err
	}
	defer slave.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		return nil, err
	}
	term := &terminal{master: master, done: make(chan struct{})}
	go term.copyOut()
	return term, nil
}

// copyOut reads the child's output until the terminal closes.
func (t *terminal) copyOut() {
	defer close(t.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := t.master.Read(buf)
		if n > 0 {
			t.mu.Lock()
			t.screen = append(t.screen, buf[:n]...)
			t.mu.Unlock()
			if containsBytes(buf[:n], "\x1b[6n") {
				t.master.Write([]byte("\x1b[1;1R"))
			}
		}
		if err != nil {
			return
		}
	}
}

func containsBytes(b []byte, s string) bool { return strings.Contains(string(b), s) }

// output returns everything written so far.
func (t *terminal) output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.screen)
}

// typeText writes keystrokes to the child.
func (t *terminal) typeText(s string) error {
	_, err := t.master.Write([]byte(s))
	return err
}

// close closes the terminal and waits for the reader.
func (t *terminal) close() {
	t.master.Close()
	<-t.done
}
