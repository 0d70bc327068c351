// SPDX-License-Identifier: MIT
/*
 * tests/cluster/nfq_delay.c - a userspace packet delayer for kernels without
 * sch_netem: every packet an iptables NFQUEUE rule sends to queue N is held
 * for a fixed delay, then accepted, in the order it came.
 *
 *   nfq_delay QUEUE DELAY_US
 *
 * Run it inside the network namespace whose rule feeds the queue, e.g.
 *   iptables -A INPUT -p tcp -s 10.78.0.0/24 -j NFQUEUE --queue-num 7 --queue-bypass
 * (on arrival rather than on OUTPUT: a packet held on its sender's side
 * still counts against its socket, and TCP holds the next small segment
 * behind it - autocorking - so some round trips took two delays).
 * Prints "nfq_delay: queue Q, delay D us, ready" once bound (before that the
 * rule's --queue-bypass lets packets through undelayed, so wait for it), and
 * on SIGTERM/SIGINT accepts what it holds and prints its counts.
 *
 * What it keeps true: a packet is never accepted before its delay has passed
 * (a constant delay, so arrival order is release order: one FIFO), and every
 * packet it took is accepted (none dropped by it; the kernel may drop when
 * its queue or our socket buffer overflows, counted as "lost" from ENOBUFS).
 * Timers: ppoll() with a 1 ns timer slack, so a 50 us delay is not rounded
 * to the default 50 us slack on top.
 */
#define _GNU_SOURCE /* ppoll */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define RING (1u << 20) /* packets held at once; past it, accepted at once */

struct held {
	uint32_t id;
	uint64_t due_ns;
};

static struct held ring[RING];
static uint64_t head, tail; /* tail - head packets held */
static uint64_t delay_ns, seen, overflow, lost;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *arg)
{
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	uint32_t id;

	(void)msg;
	(void)arg;
	if (!ph)
		return 0;
	id = ntohl(ph->packet_id);
	seen++;
	if (tail - head == RING) {
		overflow++;
		return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
	}
	ring[tail % RING] = (struct held){ id, now_ns() + delay_ns };
	tail++;
	return 0;
}

/* Accept every held packet due by @t (all of them when @t is UINT64_MAX). */
static void release(struct nfq_q_handle *qh, uint64_t t)
{
	while (head != tail && ring[head % RING].due_ns <= t) {
		nfq_set_verdict(qh, ring[head % RING].id, NF_ACCEPT, 0, NULL);
		head++;
	}
}

int main(int argc, char **argv)
{
	static char buf[1 << 16] __attribute__((aligned));
	struct nfq_handle *h;
	struct nfq_q_handle *qh;
	unsigned long q, d;
	char *end;
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: nfq_delay QUEUE DELAY_US\n");
		return 2;
	}
	q = strtoul(argv[1], &end, 10);
	if (*end || q > 65535) {
		fprintf(stderr, "nfq_delay: QUEUE wants 0..65535\n");
		return 2;
	}
	d = strtoul(argv[2], &end, 10);
	if (*end || d > 10000000) {
		fprintf(stderr, "nfq_delay: DELAY_US wants 0..10000000\n");
		return 2;
	}
	delay_ns = (uint64_t)d * 1000;
	prctl(PR_SET_TIMERSLACK, 1UL);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	h = nfq_open();
	if (!h) {
		perror("nfq_delay: nfq_open");
		return 1;
	}
	qh = nfq_create_queue(h, (uint16_t)q, on_packet, NULL);
	if (!qh) {
		perror("nfq_delay: nfq_create_queue (another reader? no NFQUEUE support?)");
		nfq_close(h);
		return 1;
	}
	if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0)
		perror("nfq_delay: nfq_set_mode (metadata only)");
	if (nfq_set_queue_maxlen(qh, RING) < 0)
		perror("nfq_delay: nfq_set_queue_maxlen");
	nfnl_rcvbufsiz(nfq_nfnlh(h), 32u << 20);
	fd = nfq_fd(h);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	printf("nfq_delay: queue %lu, delay %lu us, ready\n", q, d);
	fflush(stdout);

	while (!stop) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		struct timespec to, *top = NULL;
		uint64_t t = now_ns();

		release(qh, t);
		if (head != tail) {
			uint64_t w = ring[head % RING].due_ns - t;

			to = (struct timespec){ (time_t)(w / 1000000000ull),
						(long)(w % 1000000000ull) };
			top = &to;
		}
		if (ppoll(&pf, 1, top, NULL) < 0 && errno != EINTR) {
			perror("nfq_delay: ppoll");
			break;
		}
		/* Drain the socket: each recv() takes one netlink batch. */
		for (int k = 0; k < 256 && !stop; k++) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n < 0 && errno == ENOBUFS) {
				lost++;
				continue;
			}
			if (n <= 0)
				break;
			nfq_handle_packet(h, buf, (int)n);
		}
	}
	release(qh, UINT64_MAX);
	printf("nfq_delay: %llu packets delayed, %llu accepted at once (full), %llu ENOBUFS\n",
	       (unsigned long long)(seen - overflow), (unsigned long long)overflow,
	       (unsigned long long)lost);
	nfq_destroy_queue(qh);
	nfq_close(h);
	return 0;
}
