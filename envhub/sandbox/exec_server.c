/* The exec server in C: what exec_server.py does, for sandboxes on a host with a C compiler.
 *
 * Why a second implementation: starting the Python one costs ~11 ms of CPU per sandbox (the interpreter's
 * start-up alone), a third of what a whole sandbox costs to make; this one starts in well under one.
 * envhub/sandbox/native.py compiles it once per host into a cache, and the host falls back to the Python
 * server wherever it cannot. Both speak the same protocol and keep the same rules; exec_server.py's
 * docstring says why each rule holds, and tests/sandbox runs the hostile suites against both.
 *
 * Protocol (one socket end, fd in argv[1]): a request is a 4-byte big-endian length, then fields each
 * ended by a NUL: the timeout in seconds, the cwd, the argument count, the arguments, then "KEY=VALUE"
 * environment entries to the end; the command's stdout, stderr (and stdin) pipe ends come with its first
 * bytes as SCM_RIGHTS. A reply is a 4-byte length and a small JSON object.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <grp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILL_GRACE_S 5.0
#define MAX_REQUEST (64u << 20)
#define MAX_FDS 3

static int sock = -1;
static int child_events = -1;
static int devnull = -1;
static int empty = 1;          /* no child left to reap */
static pid_t main_pid = 0;     /* the command's own process */
static int main_status = 0;
static int main_done = 0;
static double cpu_budget = 0;  /* <= 0: none */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *why) {
    dprintf(2, "%s\n", why);
    _exit(1);
}

static void send_all(const char *data, size_t size) {
    while (size > 0) {
        ssize_t n = send(sock, data, size, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            _exit(0); /* the host is gone */
        }
        data += n;
        size -= (size_t)n;
    }
}

/* A reply; `text` is a JSON object made here from ints, booleans and plain ASCII only. */
static void reply(const char *text) {
    size_t size = strlen(text);
    unsigned char header[4] = {size >> 24, size >> 16, size >> 8, size};
    char buffer[4 + 512];
    if (size > 512)
        size = 512;
    memcpy(buffer, header, 4);
    memcpy(buffer + 4, text, size);
    send_all(buffer, 4 + size);
}

/* A string as JSON's plain characters only (what exec_server.py's `send` does): anything else is '?'. */
static void plain(char *out, size_t room, const char *text) {
    size_t i = 0;
    for (; *text && i + 1 < room; text++, i++) {
        unsigned char c = (unsigned char)*text;
        out[i] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\'' && c != '\\') ? (char)c : '?';
    }
    out[i] = 0;
}

static void reply_error(const char *what) {
    char clean[256], text[320];
    plain(clean, sizeof clean, what);
    snprintf(text, sizeof text, "{\"error\": \"%s\"}", clean);
    reply(text);
}

/* Read exactly `size` more bytes into `into`; 0 when the host hung up. */
static int receive_exactly(char *into, size_t size) {
    while (size > 0) {
        ssize_t n = recv(sock, into, size, 0);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return 0;
        }
        into += n;
        size -= (size_t)n;
    }
    return 1;
}

/* One request: its body (malloc'd, *size bytes) and its descriptors; NULL when the host has gone. */
static char *receive(size_t *size, int *fds, int *nfds) {
    char first[4];
    char control[CMSG_SPACE(MAX_FDS * sizeof(int))];
    struct iovec iov = {first, sizeof first};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got;
    do
        got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    *nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < n && *nfds < MAX_FDS; i++)
                memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
    }
    if (msg.msg_flags & MSG_CTRUNC)
        die("a request came with more descriptors than a command takes");
    if (got <= 0)
        return NULL;
    if (got < 4 && !receive_exactly(first + got, 4 - (size_t)got))
        return NULL;
    uint32_t length = ((uint32_t)(unsigned char)first[0] << 24) | ((uint32_t)(unsigned char)first[1] << 16) |
                      ((uint32_t)(unsigned char)first[2] << 8) | (uint32_t)(unsigned char)first[3];
    if (length > MAX_REQUEST)
        die("a request past the byte limit");
    char *body = malloc(length + 1);
    if (body == NULL)
        die("out of memory for a request");
    if (!receive_exactly(body, length)) {
        free(body);
        return NULL;
    }
    body[length] = 0;
    *size = length;
    return body;
}

static int exit_code(int status) {
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* Reap every child that has ended; whether to look again at once (some reaped, or none left). */
static int reap(void) {
    int took = 0;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            empty = 1; /* ECHILD */
            return 1;
        }
        if (pid == 0)
            return took;
        if (pid == main_pid) {
            main_status = status;
            main_done = 1;
        }
        took = 1;
    }
}

/* Reap what has ended, waiting up to `timeout` s for a child to end if none has; 0 when the host closed
 * its end (it sends nothing while a command runs). */
static int collect(double timeout) {
    char pending[sizeof(struct signalfd_siginfo) * 64];
    while (read(child_events, pending, sizeof pending) > 0) {
    }
    if (reap())
        return 1;
    if (timeout < 0)
        timeout = 0;
    if (!(timeout < 86400))
        timeout = 86400; /* a longer (or NaN) deadline is waited for a day at a time */
    struct pollfd watch[2] = {{child_events, POLLIN, 0}, {sock, POLLIN, 0}};
    struct timespec wait = {(time_t)timeout, (long)((timeout - (double)(time_t)timeout) * 1e9)};
    if (ppoll(watch, 2, &wait, NULL) < 0)
        return 1;
    return watch[1].revents == 0;
}

/* SIGKILL every process but this one until none is left; 0 if some outlive the grace. */
static int kill_all(void) {
    double end = now() + KILL_GRACE_S;
    while (!empty) {
        kill(-1, SIGKILL); /* ESRCH: none alive, only zombies to reap */
        double left = end - now();
        if (left <= 0 || !collect(left < 0.05 ? left : 0.05))
            return 0;
    }
    return 1;
}

static int start(pid_t *pid, const char *path, char *const argv[], char *const env[], int stdio[3]) {
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t actions;
    sigset_t defaults, none;
    sigfillset(&defaults);
    sigdelset(&defaults, SIGKILL);
    sigdelset(&defaults, SIGSTOP);
    sigemptyset(&none);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawn_file_actions_init(&actions);
    for (int n = 0; n < 3; n++)
        posix_spawn_file_actions_adddup2(&actions, stdio[n], n);
    int error = posix_spawn(pid, path, &actions, &attr, argv, env);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return error;
}

/* A file without a #! line, run by /bin/sh as execvp does: `sh PATH ARG...`. */
static int start_script(pid_t *pid, const char *path, char **argv, int argc, char *const env[], int stdio[3]) {
    char **shell = calloc((size_t)argc + 2, sizeof *shell);
    if (shell == NULL)
        return ENOMEM;
    shell[0] = "/bin/sh";
    shell[1] = (char *)path;
    for (int i = 1; i < argc; i++)
        shell[i + 1] = argv[i];
    int error = start(pid, "/bin/sh", shell, env, stdio);
    free(shell);
    return error;
}

/* Start the command as bubblewrap did (own session, default signals, cwd, env, execvp's PATH search);
 * 0 after writing bubblewrap's own words for a cwd or exec failure to its stderr. */
static pid_t spawn(char **argv, int argc, char **env, int nenv, const char *cwd, int stdio[3]) {
    if (chdir(cwd) != 0) {
        dprintf(stdio[2], "bwrap: Can't chdir to %s: %s\n", cwd, strerror(errno));
        return 0;
    }
    const char *path_value = NULL;
    for (int i = 0; i < nenv; i++)
        if (strncmp(env[i], "PATH=", 5) == 0)
            path_value = env[i] + 5;
    const char *name = argv[0];
    pid_t pid = 0;
    int error = ENOENT;
    if (strchr(name, '/') != NULL) {
        error = start(&pid, name, argv, env, stdio);
        if (error == ENOEXEC)
            error = start_script(&pid, name, argv, argc, env, stdio);
    } else {
        const char *folders = path_value != NULL ? path_value : "/bin:/usr/bin";
        size_t room = strlen(folders) + strlen(name) + 3;
        char *full = malloc(room);
        for (const char *at = folders;;) {
            const char *colon = strchr(at, ':');
            size_t length = colon != NULL ? (size_t)(colon - at) : strlen(at);
            if (length == 0)
                snprintf(full, room, "./%s", name);
            else
                snprintf(full, room, "%.*s/%s", (int)length, at, name);
            struct stat st;
            int there = stat(full, &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
            if (there) {
                int e = start(&pid, full, argv, env, stdio);
                if (e == 0) {
                    error = 0;
                    break;
                }
                if (e == ENOEXEC) {
                    error = start_script(&pid, full, argv, argc, env, stdio);
                    break;
                }
                if (e != EACCES && e != ENOENT && e != ENOTDIR) {
                    error = e;
                    break;
                }
                if (error != EACCES)
                    error = e; /* execvp reports EACCES if any candidate gave it, else the last error */
            }
            if (colon == NULL)
                break;
            at = colon + 1;
        }
        free(full);
    }
    if (error != 0) {
        dprintf(stdio[2], "bwrap: execvp %s: %s\n", name, strerror(error));
        return 0;
    }
    return pid;
}

/* Parse a request body into its fields (pointers into it); 0 if it is malformed. */
static int parse(char *body, size_t size, double *timeout, char **cwd, char ***argv, int *argc, char ***env,
                 int *nenv) {
    size_t count = 0;
    if (size == 0 || body[size - 1] != 0)
        return 0;
    for (size_t i = 0; i < size; i++)
        count += body[i] == 0;
    char **fields = calloc(count + 2, sizeof *fields);
    if (fields == NULL)
        return 0;
    size_t n = 0;
    for (char *at = body; at < body + size; at += strlen(at) + 1)
        fields[n++] = at;
    if (n < 4) {
        free(fields);
        return 0;
    }
    *timeout = strtod(fields[0], NULL);
    *cwd = fields[1];
    long args = strtol(fields[2], NULL, 10);
    if (args < 1 || (size_t)args > n - 3) {
        free(fields);
        return 0;
    }
    *argc = (int)args;
    *argv = fields + 3; /* the argument vector and the environment share one array: NULLs between them */
    *nenv = (int)(n - 3 - (size_t)args);
    /* argv needs its NULL at fields[3 + args], where env begins: env moves one slot up. */
    memmove(fields + 4 + args, fields + 3 + args, (size_t)*nenv * sizeof *fields);
    fields[3 + args] = NULL;
    *env = fields + 4 + args;
    fields[4 + args + *nenv] = NULL;
    return 1;
}

static void add_pwd(char ***env, int *nenv, const char *cwd, char **storage) {
    /* bwrap's --chdir sets PWD: replace it or add it. */
    size_t size = strlen(cwd) + 5;
    *storage = malloc(size);
    snprintf(*storage, size, "PWD=%s", cwd);
    for (int i = 0; i < *nenv; i++) {
        if (strncmp((*env)[i], "PWD=", 4) == 0) {
            (*env)[i] = *storage;
            return;
        }
    }
    char **grown = calloc((size_t)*nenv + 2, sizeof *grown);
    memcpy(grown, *env, (size_t)*nenv * sizeof *grown);
    grown[(*nenv)++] = *storage;
    *env = grown;
}

static void run(char *body, size_t size, int *fds, int nfds) {
    double timeout;
    char *cwd, **argv, **env;
    int argc, nenv;
    if (!parse(body, size, &timeout, &cwd, &argv, &argc, &env, &nenv)) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        reply_error("a request the exec server could not read");
        return;
    }
    char **fields = argv - 3;
    char **original_env = env;
    char *pwd = NULL;
    add_pwd(&env, &nenv, cwd, &pwd);
    int stdio[3] = {nfds > 2 ? fds[2] : devnull, fds[0], fds[1]};
    double deadline = now() + (timeout > 0 ? timeout : 0);
    main_done = 0;
    main_pid = spawn(argv, argc, env, nenv, cwd, stdio);
    for (int i = 0; i < nfds; i++)
        close(fds[i]); /* the command holds the only copies left: its pipes end with it */
    if (env != original_env)
        free(env);
    free(pwd);
    free(fields);
    if (main_pid == 0) {
        reply("{\"exit_code\": 1, \"timed_out\": false}");
        return;
    }
    empty = 0;
    int timed_out = 0;
    while (!main_done) {
        double left = deadline - now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        if (!collect(left)) {
            kill_all();
            _exit(0);
        }
    }
    if (!kill_all()) {
        reply("{\"error\": \"processes of the command outlived SIGKILL by 5 s\"}");
        return;
    }
    char text[128];
    int retire = 0;
    if (cpu_budget > 0) {
        struct rusage usage;
        getrusage(RUSAGE_SELF, &usage);
        double used = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 +
                      (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec / 1e6;
        retire = used > cpu_budget;
    }
    if (timed_out)
        snprintf(text, sizeof text, "{\"exit_code\": -1, \"timed_out\": true%s}", retire ? ", \"retire\": true" : "");
    else
        snprintf(text, sizeof text, "{\"exit_code\": %d, \"timed_out\": false%s}", exit_code(main_status),
                 retire ? ", \"retire\": true" : "");
    reply(text);
    if (retire)
        _exit(0);
}

/* Whether folder `above` is `path` or holds it. */
static int covers(const char *above, const char *path) {
    size_t n = strlen(above);
    if (n == 1 && above[0] == '/')
        return 1;
    return strncmp(above, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* A mountinfo field as the path it names: the kernel writes space, tab, newline and backslash as \ooo. */
static void unescape(char *text) {
    char *out = text;
    for (char *in = text; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
            in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

/* The mount points of this mount namespace, in the kernel's order; NULL where the table cannot be read. */
static char **mount_points(int *count) {
    FILE *table = fopen("/proc/self/mountinfo", "re");
    if (table == NULL)
        return NULL;
    char **points = NULL, *line = NULL;
    size_t room = 0;
    int n = 0;
    while (getline(&line, &room, table) > 0) {
        char *field = line;
        for (int skip = 0; skip < 4 && field != NULL; skip++)
            field = strchr(field + 1, ' ');
        if (field == NULL)
            continue;
        char *end = strchr(++field, ' ');
        if (end != NULL)
            *end = '\0';
        unescape(field);
        char **grown = realloc(points, sizeof *points * (size_t)(n + 1));
        if (grown == NULL)
            break;
        points = grown;
        points[n++] = strdup(field);
    }
    free(line);
    fclose(table);
    *count = n;
    return points;
}

/* Leave bubblewrap a mount namespace holding only what its sandbox binds. Why: bwrap rereads the mount
 * table after every bind it makes (some 25 a sandbox), and the host's table lists every mount there is:
 * each live sandbox's scratch tmpfs, a Docker host's overlays, a desktop's snaps. Measured on a 2-vCPU
 * host with 48 scratch areas mounted, a bwrap start cost 8.7 ms of machine CPU with the host's table
 * and 7.6 ms with this one; the kernel's `show_mountinfo` alone was 5.7% of all CPU at concurrency 32.
 *
 * As root, in a new private mount namespace (nothing here reaches the host's): bind the root file
 * system alone onto `staging` (an empty folder of the sandbox's own scratch area), bind into it every
 * mount that holds a kept path or lies beneath one, make it the root and detach the old one, all of it in
 * one unmount. What the sandbox sees is unchanged: bwrap binds the same paths from the same mounts.
 * Where a step before the switch fails (a host whose root cannot be pivoted, an initramfs say), it
 * returns with the host's namespace left for bwrap as it was: slower, never different. */
static void trim_mounts(const char *staging, int nkeep, char **keep) {
    char **kept = calloc((size_t)nkeep + 1, sizeof *kept);
    int nkept = 0;
    for (int k = 0; k < nkeep; k++)
        if ((kept[nkept] = realpath(keep[k], NULL)) != NULL) /* a missing one: bwrap skips or fails it */
            nkept++;
    int npoints = 0;
    char **points = NULL;
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        (points = mount_points(&npoints)) == NULL || mount("/", staging, NULL, MS_BIND, NULL) != 0)
        return;
    /* Binds in passes until none is left that can be made: a mount must come after the one it sits on,
     * and the table's order is the order mounts were made, not always parents first. */
    char *done = calloc((size_t)npoints, 1), target[PATH_MAX];
    for (int progress = 1; progress;) {
        progress = 0;
        for (int m = 0; m < npoints; m++) {
            if (done[m] || strcmp(points[m], "/") == 0)
                continue;
            int needed = 0;
            for (int k = 0; k < nkept && !needed; k++)
                needed = covers(points[m], kept[k]) || covers(kept[k], points[m]);
            if (!needed || snprintf(target, sizeof target, "%s%s", staging, points[m]) >= (int)sizeof target)
                done[m] = 1;
            else if (mount(points[m], target, NULL, MS_BIND, NULL) == 0)
                done[m] = progress = 1;
        }
    }
    for (int m = 0; m < npoints; m++)
        if (!done[m] && strcmp(points[m], "/") != 0)
            return;
    if (chdir(staging) != 0)
        return;
    if (syscall(SYS_pivot_root, ".", ".") != 0) {
        if (chdir("/") != 0)
            _exit(125);
        return;
    }
    /* The old root now sits on the new one: one lazy unmount takes it, with every mount beneath it. */
    if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
        dprintf(2, "envhub launcher: cannot detach the host's mounts: %s\n", strerror(errno));
        _exit(125);
    }
}

/* `launch UID|- N JOIN... M RESOURCE=VALUE... K [STAGING KEEP...] -- PROGRAM ARG...`: what setpriv and a
 * `sh -c` launcher did before each bubblewrap start, in one exec instead of three (~3 ms of CPU less per
 * start): join the slot's cgroups, leave PROGRAM a mount namespace of the K kept paths alone (as root,
 * where K > 0: trim_mounts), drop to the slot's uid (as root; no supplementary groups), lower the rlimits
 * (soft and hard, as the shell's ulimit did), then exec PROGRAM with every descriptor it was given. Any
 * failure to join or drop exits 125 before PROGRAM runs, as the shell launcher did. */
static int launch(int argc, char **argv) {
    int i = 2;
    if (argc < 6)
        die("usage: envhub-exec-server launch UID|- N JOIN... M RESOURCE=VALUE... K [STAGING KEEP...] -- "
            "PROGRAM ARG...");
    const char *uid = argv[i++];
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    /* Joined first, while root where root: once trimmed, the cgroup folders are out of sight. */
    for (long joins = strtol(argv[i++], NULL, 10); joins > 0 && i < argc; joins--, i++) {
        int fd = open(argv[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, pid, strlen(pid)) < 0) {
            dprintf(2, "envhub launcher: cannot join %s: %s\n", argv[i], strerror(errno));
            _exit(125);
        }
        close(fd);
    }
    int nlimits = i < argc ? (int)strtol(argv[i++], NULL, 10) : 0;
    char **limits = argv + i;
    if ((i += nlimits) >= argc)
        die("envhub launcher: no -- PROGRAM after the limits");
    long nkeep = i < argc && strcmp(argv[i], "--") != 0 ? strtol(argv[i++], NULL, 10) : 0;
    if (nkeep > 0 && i + nkeep < argc) {
        trim_mounts(argv[i], (int)nkeep, argv + i + 1);
        i += 1 + (int)nkeep;
    }
    if (strcmp(uid, "-") != 0) {
        uid_t id = (uid_t)strtoul(uid, NULL, 10);
        if (setgroups(0, NULL) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0) {
            dprintf(2, "envhub launcher: cannot become uid %u: %s\n", id, strerror(errno));
            _exit(125);
        }
    }
    for (int l = 0; l < nlimits; l++) {
        char *value;
        int resource = (int)strtol(limits[l], &value, 10);
        if (*value != '=')
            die("envhub launcher: a limit is RESOURCE=VALUE");
        rlim_t wanted = (rlim_t)strtoull(value + 1, NULL, 10);
        struct rlimit limit = {wanted, wanted};
        if (setrlimit(resource, &limit) != 0 && getrlimit(resource, &limit) == 0) {
            /* Above the hard limit (not root): the hard limit it is, never more than was asked. */
            if (limit.rlim_max < wanted)
                wanted = limit.rlim_max;
            limit.rlim_cur = limit.rlim_max = wanted;
            setrlimit(resource, &limit);
        }
    }
    if (i >= argc - 1 || strcmp(argv[i], "--") != 0)
        die("envhub launcher: no -- PROGRAM after the kept paths");
    execv(argv[i + 1], argv + i + 1);
    dprintf(2, "envhub launcher: cannot run %s: %s\n", argv[i + 1], strerror(errno));
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "launch") == 0)
        return launch(argc, argv);
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0)
        die("could not make the exec server non-dumpable");
    if (getpid() != 1)
        die("the exec server must be the sandbox's pid 1 (bwrap --as-pid-1)");
    if (argc != 2)
        die("usage: envhub-exec-server SOCKET_FD");
    /* No handler for any signal: the kernel then drops every signal sent to an init from inside its
     * namespace. glibc's two internal ones (SIGCANCEL, SIGSETXID) are set to ignored as well, through the
     * system call, since glibc's sigaction refuses them. */
    struct {
        unsigned long handler, flags, restorer, mask;
    } ignore = {(unsigned long)SIG_IGN, 0, 0, 0};
    for (int sig = 32; sig <= 33; sig++)
        if (syscall(SYS_rt_sigaction, sig, &ignore, NULL, 8) != 0)
            die("could not ignore glibc's internal signals");
    sock = atoi(argv[1]);
    if (fcntl(sock, F_SETFD, FD_CLOEXEC) != 0)
        die("no socket at the descriptor given");
    for (int fd = 0; fd < 3; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sigset_t children;
    sigemptyset(&children);
    sigaddset(&children, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &children, NULL) != 0)
        die("could not block SIGCHLD");
    child_events = signalfd(-1, &children, SFD_NONBLOCK | SFD_CLOEXEC);
    if (child_events < 0)
        die("could not open a signalfd for SIGCHLD");
    struct rlimit cpu;
    if (getrlimit(RLIMIT_CPU, &cpu) == 0 && cpu.rlim_cur != RLIM_INFINITY)
        cpu_budget = (double)cpu.rlim_cur / 2;
    reply("{\"ready\": true}");
    for (;;) {
        int fds[MAX_FDS], nfds;
        size_t size;
        char *body = receive(&size, fds, &nfds);
        if (body == NULL)
            return 0;
        if (nfds < 2) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            free(body);
            reply_error("a request came without its output pipes");
            continue;
        }
        run(body, size, fds, nfds);
        free(body);
    }
}
