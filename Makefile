# The two commands of the README:
#   make demo   set up, build, and train the quickstart (convnet on real Fashion-MNIST)
#   make test   set up, build, and run the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: demo test build setup configure clean

demo: build
	./$(BUILD)/trainer --config configs/quickstart.yaml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

configure: setup
	@if [ ! -f $(BUILD)/build.ninja ]; then cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS); fi

setup:
	bash scripts/setup.sh

clean:
	rm -rf $(BUILD)
