/* Opens a TCP socket and connects to 127.0.0.1:PORT through io_uring only
 * (IORING_OP_SOCKET, IORING_OP_CONNECT): no socket(2) or connect(2) call. Exits 0 once
 * connected; otherwise prints the failed stage and its errno and exits 3. A probe for the
 * sandbox tests: the red team reached the network this way past a socket(2) filter. */
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct io_uring_sqe *sqes;
static unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
static struct io_uring_cqe *cqes;
static int ring;

static int submit(struct io_uring_sqe *sqe) {
    unsigned tail = *sq_tail, index = tail & *sq_mask;
    sqes[index] = *sqe;
    sq_array[index] = index;
    __atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
        return -errno;
    unsigned head = __atomic_load_n(cq_head, __ATOMIC_ACQUIRE);
    int res = cqes[head & *cq_mask].res;
    __atomic_store_n(cq_head, head + 1, __ATOMIC_RELEASE);
    return res;
}

static int fail(const char *stage, int error) {
    printf("%s: %s\n", stage, strerror(error));
    return 3;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    ring = syscall(__NR_io_uring_setup, 4, &params);
    if (ring < 0) return fail("io_uring_setup", errno);
    size_t sq_size = params.sq_off.array + params.sq_entries * sizeof(unsigned);
    size_t cq_size = params.cq_off.cqes + params.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
    sqes = mmap(0, params.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) return fail("mmap", errno);
    sq_tail = (unsigned *)(sq + params.sq_off.tail);
    sq_mask = (unsigned *)(sq + params.sq_off.ring_mask);
    sq_array = (unsigned *)(sq + params.sq_off.array);
    cq_head = (unsigned *)(cq + params.cq_off.head);
    cq_tail = (unsigned *)(cq + params.cq_off.tail);
    cq_mask = (unsigned *)(cq + params.cq_off.ring_mask);
    cqes = (struct io_uring_cqe *)(cq + params.cq_off.cqes);

    struct io_uring_sqe sqe;
    memset(&sqe, 0, sizeof sqe);
    sqe.opcode = IORING_OP_SOCKET;
    sqe.fd = AF_INET;
    sqe.off = SOCK_STREAM;
    int fd = submit(&sqe);
    if (fd < 0) return fail("IORING_OP_SOCKET", -fd);

    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons(atoi(argv[1]));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    memset(&sqe, 0, sizeof sqe);
    sqe.opcode = IORING_OP_CONNECT;
    sqe.fd = fd;
    sqe.addr = (unsigned long)&address;
    sqe.off = sizeof address;
    int connected = submit(&sqe);
    if (connected < 0) return fail("IORING_OP_CONNECT", -connected);
    printf("connected\n");
    return 0;
}
