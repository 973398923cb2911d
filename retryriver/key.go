package retryriver

import (
	"strconv"

	"github.com/riverqueue/river/rivertype"
)

// IdempotencyKey returns a key for the work of job that is the same on every
// attempt, in every process, and after a crash, because it is made only of
// what River stores for the job: its kind, its ID and when it was created,
// as "river:KIND:ID:CREATED", CREATED in microseconds since the Unix epoch
// (for example "river:notify:42:1764626400000000"). A worker sends it with
// each request to a provider that deduplicates (an Idempotency-Key header,
// Stripe's idempotency key), so that an attempt repeated after a timeout,
// a lost reply or a dead worker has its effect once:
//
//	req.Header.Set("Idempotency-Key", retryriver.IdempotencyKey(job.JobRow))
//
// The ID tells apart the jobs of one database; the creation time, those of a
// database whose IDs were reused (restored or reset). Two River databases
// that send to one provider should prefix the key with their own name. The
// key is not secret: anyone who can read the job can make it. A nil job
// gives "".
func IdempotencyKey(job *rivertype.JobRow) string {
	if job == nil {
		return ""
	}
	b := make([]byte, 0, 48)
	b = append(b, "river:"...)
	b = append(b, job.Kind...)
	b = append(b, ':')
	b = strconv.AppendInt(b, job.ID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, job.CreatedAt.UnixMicro(), 10)
	return string(b)
}
