// Package trainerenv is the trainer's contract: the environment a training
// process is given for its generation, under the names its framework's own
// launcher would have used, so that a script written for that launcher runs
// unchanged.
//
// One table (table.go) holds every variable, and computes each from the
// generation's plan and, for a process, its member and local rank. The
// sidecar gives each process its node's variables (Node.Env); the
// Kubernetes bridge writes the job-wide ones, as a worker sees them, to the
// ConfigMap <job>-elastic (Generation.Shared). The ConfigMap is a
// projection of the same table, not a table of its own.
//
// Each variable belongs to a family, and a process gets the project's
// family and its framework's (Framework; AnyFramework gives every one).
// The names come from these launchers, whose variables a script reads:
//
//   - generic: ELASTIC_*, this project's own.
//   - PyTorch: torchrun's elastic agent, LocalElasticAgent._start_workers in
//     torch/distributed/elastic/agent/server/local_elastic_agent.py (the
//     worker group's ranks and sizes are those of
//     torch/distributed/elastic/agent/server/api.py); torchrun itself is
//     torch/distributed/run.py (OMP_NUM_THREADS); env:// in
//     torch/distributed/rendezvous.py reads TORCHELASTIC_USE_AGENT_STORE.
//   - PaddlePaddle: paddle.distributed.launch, its collective and parameter
//     server controllers in
//     python/paddle/distributed/launch/controllers/collective.py and ps.py
//     (PADDLE_MASTER, PADDLE_GLOBAL_*, PADDLE_LOCAL_*, PADDLE_NNODES,
//     PADDLE_TRAINER_*, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_PORT, POD_IP,
//     TRAINING_ROLE, PADDLE_ROLE, FLAGS_selected_gpus,
//     PADDLE_DISTRI_BACKEND, PADDLE_WITH_GLOO and PADDLE_GLOO_*), which
//     python/paddle/distributed/parallel.py (init_parallel_env) reads; the
//     older fleetrun, python/paddle/distributed/fleet/launch_utils.py, for
//     the heterogeneous trainers' PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST;
//     fleet's GeneralRoleMaker,
//     python/paddle/fluid/incubate/fleet/base/role_maker.py, which reads
//     PADDLE_PSERVER_ID; paddle-operator's ConfigMap, constructConfigMap in
//     controllers/paddlejob_helper.go, for PADDLE_TRAINERS (the workers'
//     hosts) and PADDLE_HETER_ENDPOINTS.
//   - paddle.distributed.launch run per node (PaddleLaunch): its flags'
//     variables, python/paddle/distributed/launch/context/args_envs.py
//     (PADDLE_MASTER, PADDLE_NNODES, PADDLE_RANK, PADDLE_NPROC_PER_NODE,
//     PADDLE_JOB_ID, POD_IP), and context/node.py's FLAGS_FIXED_PORT; what
//     is taken from it, fleet/elastic/__init__.py (PADDLE_ELASTIC_*) and
//     launch/plugins/__init__.py (PADDLE_TRAINER_ENDPOINTS and the like).
//   - MindSpore: msrun, mindspore/python/mindspore/parallel/cluster/
//     process_entity/_api.py (MS_WORKER_NUM, MS_SCHED_HOST, MS_SCHED_PORT,
//     MS_ROLE, MS_NODE_ID, RANK_ID, RANK_SIZE, DEVICE_ID, MS_TOPO_TIMEOUT);
//     the scheduler ranks numeric node ids as they are,
//     mindspore/ccsrc/distributed/cluster/topology/meta_server_node.cc;
//     MS_SERVER_NUM, which parameter-server mode reads, is in
//     mindspore/ccsrc/include/backend/distributed/constants.h.
//
// docs/frameworks.md has the same, variable by variable.
//
// The guard adds its own variables to every process (guard.EnvFenceSocket,
// guard.EnvWatchdogSocket, guard.EnvCoordinator, guard.EnvGuardID): they
// name the guard and the process's fence watchdog, not the generation, and
// are the guard's.
package trainerenv
