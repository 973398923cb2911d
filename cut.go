package retry

import (
	"context"
	"runtime"
	"sync"
	"weak"
)

// cutCtx is the context of one attempt of a hedged call: its parent's (the
// caller's, or one bounded by AttemptTimeout), numbered, which the call can
// also cut when another attempt wins or the call stops. The attempt that
// wins is never cut: it lives on as its parent does, as an attempt of a call
// that does not hedge lives on the caller's context, so that a value bound
// to it (a response body, a cursor) can still be read after Do returns.
//
// It asks its parent to tell it of its end only once someone asks for its
// Done channel or registers an AfterFunc, so that an attempt whose work
// never looks at its context costs no registration. A winner's registration
// holds it only weakly, and is given back once the winner's context is no
// longer reachable: a call on a long-lived parent leaks nothing.
type cutCtx struct {
	context.Context // the parent
	n               int

	mu     sync.Mutex
	done   chan struct{} // made when first asked for
	err    error         // why it ended; nil while it lives
	afters map[*func()]struct{}
	unlink func() bool // the registration with the parent's end; nil if none
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// attempt returns the attempt's number, for AttemptFrom.
func (c *cutCtx) attemptNumber() int { return c.n }

func (c *cutCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func (c *cutCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			c.done = closedChan
		} else {
			c.done = make(chan struct{})
			c.linkLocked()
		}
	}
	return c.done
}

func (c *cutCtx) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.Context.Err()
}

// AfterFunc runs f once the context ends, as context.AfterFunc does; the
// context package calls it for contexts made from this one, so that they
// need no goroutine of their own to learn of its end.
func (c *cutCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	if c.afters == nil {
		c.afters = make(map[*func()]struct{})
	}
	c.linkLocked()
	key := &f
	c.afters[key] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.afters[key]; !ok {
			return false
		}
		delete(c.afters, key)
		return true
	}
}

// linkLocked asks the parent to end this context when it ends, once. The
// registration holds c weakly, so that a winner's context that is no longer
// reachable is collected, and its registration given back then.
func (c *cutCtx) linkLocked() {
	if c.unlink != nil || c.Context.Done() == nil {
		return
	}
	wp := weak.Make(c)
	parent := c.Context
	c.unlink = context.AfterFunc(parent, func() {
		if c := wp.Value(); c != nil {
			c.endWith(parent.Err())
		}
	})
}

// cutOff ends an attempt the call no longer wants: it lost, or the call
// stopped.
func (c *cutCtx) cutOff() { c.endWith(context.Canceled) }

// endWith ends the context with err, once: its Done closes, its AfterFuncs run,
// and its registration with the parent is given back.
func (c *cutCtx) endWith(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	afters := c.afters
	c.afters = nil
	unlink := c.unlink
	c.mu.Unlock()
	if unlink != nil {
		unlink()
	}
	for f := range afters {
		go (*f)()
	}
}

// keepAlive leaves a winner's context to live on as its parent does. Its
// registration with the parent, if it has one, is given back once the
// context is no longer reachable.
func (c *cutCtx) keepAlive() {
	c.mu.Lock()
	unlink := c.unlink
	c.mu.Unlock()
	if unlink != nil {
		runtime.AddCleanup(c, func(unlink func() bool) { unlink() }, unlink)
	}
}
