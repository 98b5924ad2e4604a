/* The public header alone, as C11 with -Wall -Wextra -Werror -pedantic. */
#include "polycl.h"

int main(void) {
    PolyclStatus s = POLYCL_STATUS_OK;
    return (int)s;
}
