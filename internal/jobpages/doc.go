// Package jobpages serves the read-only HTML pages of the jobs that serve
// shows on its metrics port: /jobs lists the jobs as `coordinator jobs`
// does, /jobs/JOB shows one as `status` and `events` do, with its timeline
// drawn by /jobs/JOB/timeline.svg. The pages read etcd on every request,
// through package jobclient, and write nothing; each is rendered whole
// before it is sent, so that an etcd that fails midway is a 503 rather
// than half a page, and a job that is not there is a 404.
//
// The templates are in templates/, embedded in the binary.
package jobpages
